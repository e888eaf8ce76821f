import subprocess
from pathlib import Path

import pytest

from bench.disk import MIB, Layout, Part, make_table
from bench.methods import (
    ALLOCATED,
    BLOCKS,
    PEER_NAMES,
    SEED_1M,
    SEED_512,
    Job,
    copy_table,
    methods_for,
    program_accepts_source_blocks,
    sparsecopy,
)
from bench.system import BenchError, Resources

GPT_EXT4 = Layout("gpt", 1 << 30, (Part(1, "ext4", MIB, (1 << 30) - 2 * MIB),))


def job_for(tmp_path: Path, layout: Layout = GPT_EXT4, **extra: object) -> Job:
    values: dict[str, object] = {
        "source": "/dev/src",
        "target": "/dev/tgt",
        "layout": layout,
        "scratch": tmp_path,
        "mount_dir": tmp_path / "mnt",
        "log": tmp_path / "log",
        "jobs": 4,
        "res": Resources(),
        "program": tmp_path / "sparsecopy",
        "block_list": tmp_path / "blocks.json",
    }
    values.update(extra)
    return Job(**values)  # type: ignore[arg-type]


def fake_program(tmp_path: Path, body: str) -> Job:
    program = tmp_path / "sparsecopy"
    program.mkdir()
    (program / "__main__.py").write_text("import sys\n" + body)
    return job_for(tmp_path)


def test_the_summary_and_the_arguments_reach_the_log(tmp_path: Path) -> None:
    job = fake_program(
        tmp_path,
        'print("copy: 50%", sys.argv[1:], file=sys.stderr)\n'
        'print("noise")\nprint(\'{"source_bytes_read": 7}\')\n',
    )
    assert sparsecopy(job, with_blocks=False) == {"source_bytes_read": 7}
    log = job.log.read_text()
    assert "['copy', '/dev/src', '/dev/tgt', '--method', 'allocated', '--jobs', '4']" in log
    assert 'summary: {"source_bytes_read": 7}' in log


def test_with_blocks_the_block_list_is_passed(tmp_path: Path) -> None:
    job = fake_program(tmp_path, 'print(sys.argv[1:], file=sys.stderr)\nprint("{}")\n')
    sparsecopy(job, with_blocks=True)
    assert f"'--source-blocks', '{tmp_path / 'blocks.json'}']" in job.log.read_text()
    with pytest.raises(BenchError, match="no block list"):
        sparsecopy(job_for(tmp_path, block_list=None), with_blocks=True)


def test_a_failing_program_is_reported_with_its_last_stderr_line(tmp_path: Path) -> None:
    job = fake_program(
        tmp_path,
        'print("sparsecopy: target is smaller than source", file=sys.stderr)\nsys.exit(3)\n',
    )
    with pytest.raises(BenchError, match="exited 3: sparsecopy: target is smaller than source"):
        sparsecopy(job, with_blocks=False)


def test_a_missing_summary_is_an_error(tmp_path: Path) -> None:
    job = fake_program(tmp_path, 'print("done")\n')
    with pytest.raises(BenchError, match="not a JSON summary"):
        sparsecopy(job, with_blocks=False)


def test_the_option_is_detected_from_the_programs_help(tmp_path: Path) -> None:
    program = tmp_path / "sparsecopy"
    program.mkdir()
    (program / "__main__.py").write_text('print("usage: copy [--verify] [--source-blocks FILE]")\n')
    assert program_accepts_source_blocks(program)
    (program / "__main__.py").write_text('print("usage: copy [--verify]")\n')
    assert not program_accepts_source_blocks(program)


def names(layout: Layout, seed_verbatim: bool = True) -> list[str]:
    return [m.name for m in methods_for(layout, seed_verbatim=seed_verbatim)]


def test_each_disk_gets_the_trim_method_its_filesystems_peers_and_the_program_last() -> None:
    assert names(GPT_EXT4) == [
        SEED_512,
        SEED_1M,
        "e2image",
        "e2image-file",
        "partclone.ext4",
        ALLOCATED,
        BLOCKS,
    ]
    xfs = Layout("gpt", 1 << 30, (Part(1, "xfs", MIB, 100 * MIB),))
    assert names(xfs, seed_verbatim=False) == [SEED_1M, "xfs_copy", ALLOCATED, BLOCKS]
    ntfs = Layout("dos", 1 << 30, (Part(1, "ntfs", MIB, 100 * MIB),))
    assert names(ntfs)[2:4] == ["ntfsclone", "partclone.ntfs"]
    # several partitions, or no table: no peer can copy the disk
    mixed = Layout("gpt", 1 << 30, (*GPT_EXT4.parts, Part(2, "swap", 2 * MIB, MIB)))
    bare = Layout(None, 1 << 30, (Part(1, "ext4", 0, 1 << 30),))
    for layout in (mixed, bare):
        assert not set(names(layout)) & set(PEER_NAMES)


def test_only_the_methods_asked_for_run_where_they_apply() -> None:
    only = [SEED_1M, "xfs_copy", ALLOCATED]
    chosen = methods_for(GPT_EXT4, seed_verbatim=True, only=only)
    assert [m.name for m in chosen] == [SEED_1M, ALLOCATED]


def read(path: Path, start: int, length: int) -> bytes:
    with path.open("rb") as f:
        f.seek(start)
        return f.read(length)


@pytest.mark.parametrize("table", ["gpt", "dos"])
def test_the_partition_table_is_copied_byte_for_byte(tmp_path: Path, table: str) -> None:
    source, target = tmp_path / "source.img", tmp_path / "target.img"
    for image in (source, target):
        with image.open("wb") as f:
            f.truncate(64 * MIB)
    layout = make_table(source, table, [("ext4", 16 * MIB), ("swap", None)])
    with source.open("r+b") as f:
        f.write(b"\xeb\x63\x90boot code")  # an MBR's boot code, which dd keeps
    job = job_for(tmp_path, layout, source=str(source), target=str(target))
    job.log.write_text("")
    copy_table(job, str(target))
    structures = [(0, 34 * 512), (64 * MIB - 33 * 512, 33 * 512)] if table == "gpt" else [(0, 512)]
    for start, length in structures:
        assert read(target, start, length) == read(source, start, length)
    listed = subprocess.run(["sfdisk", "--dump", str(target)], capture_output=True, text=True)
    assert listed.stdout.count("start=") == 2
