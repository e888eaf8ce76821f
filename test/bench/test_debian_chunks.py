from bench.debian_chunks import directory_of, ext4_metadata, render

DUMPE2FS = """Group 0: (Blocks 0-32767) csum 0x1234 [ITABLE_ZEROED]
  Primary superblock at 0, Group descriptors at 1-1
  Reserved GDT blocks at 2-128
  Block bitmap at 129 (+129)
  Inode bitmap at 145 (+145)
  Inode table at 161-672 (+161)
Group 1: (Blocks 32768-65535) csum 0x5678 [INODE_UNINIT, ITABLE_ZEROED]
  Backup superblock at 32768, Group descriptors at 32769-32769
"""


def test_ext4_metadata_names_every_structure_no_inode_owns() -> None:
    assert sorted(ext4_metadata(DUMPE2FS)) == [
        (0, 0, "ext4 superblocks"),
        (1, 1, "ext4 group descriptors"),
        (2, 128, "ext4 reserved GDT blocks"),
        (129, 129, "ext4 block bitmaps"),
        (145, 145, "ext4 inode bitmaps"),
        (161, 672, "ext4 inode tables"),
        (32768, 32768, "ext4 superblocks"),
        (32769, 32769, "ext4 group descriptors"),
    ]


def test_files_are_grouped_by_their_first_two_directories() -> None:
    assert directory_of("/var/log/journal/x/system.journal") == "/var/log/"
    assert directory_of("/swapfile") == "/swapfile"
    assert directory_of("/usr/bin") == "/usr/bin"


def test_render_lists_each_program_and_its_zero_chunks_by_owner() -> None:
    document = {
        "snapshot": "s.img",
        "held": 10,
        "lower_bound": 8,
        "nonzero_bound": 6,
        "zero_bound_owners": {"ext4 journal (inode 8)": 2},
        "results": [
            {"label": "before", "chunks": 6, "zero_chunks": 0, "needed_absent": 2,
             "outside_held": 0, "zero_owners": {}},
            {"label": "after", "chunks": 8, "zero_chunks": 2, "needed_absent": 0,
             "outside_held": 0, "zero_owners": {"ext4 inode tables": 2}},
        ],
    }  # fmt: skip
    text = render(document)
    assert "the all-zero ones by owner: ext4 journal (inode 8) 2" in text
    assert "| before | 6 | 0 | 2 | 0 |" in text and "| after | 8 | 2 | 0 | 0 |" in text
    assert "after: all-zero chunks stored, by owner: ext4 inode tables 2" in text
    assert "before: all-zero chunks stored, by owner: none" in text
