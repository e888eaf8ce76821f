from pathlib import Path

from bench.methods import ALLOCATED, BLOCKS, SEED_1M, SEED_512
from bench.report import (
    EXACT,
    Record,
    evaluate,
    load,
    markdown_report,
    markdown_table,
    rows,
    save,
    target_lines,
)

GIB = 1 << 30
MIB = 1 << 20
PEER_CHUNKS = f"allocated: {EXACT} <= best faithful peer's"
EXACT_GOALS = {
    method: [
        f"{method}: exact on an encrypted launch: held and needed chunks left absent = 0",
        f"{method}: faithful on an encrypted restore (absent blocks read random)",
    ]
    for method in (ALLOCATED, BLOCKS)
}
EXACT_GOALS[BLOCKS].append(f"{BLOCKS}: stores no chunk the source does not hold")


def record(
    method: str, seconds: float, read: int, chunks: int, disk: str = "ext4", **extra: object
) -> Record:
    base = Record(
        disk,
        method,
        GIB,
        needed_bytes=400 * MIB,
        lower_bound_chunks=800,
        held_bytes=1000 * MIB,
        held_needed_bytes=390 * MIB,
    )
    base.seconds, base.source_bytes_read, base.target_chunks = seconds, read, chunks
    base.target_bytes_written, base.verified = chunks * 512 * 1024, True
    base.needed_absent_chunks, base.outside_held_chunks, base.encrypted_problems = 0, 0, []
    for key, value in extra.items():
        setattr(base, key, value)
    return base


def good_run() -> list[Record]:
    return [
        record(SEED_512, 60.0, GIB, 810),
        record(SEED_1M, 15.0, GIB, 812),
        record("e2image", 11.0, 450 * MIB, 820),
        record("partclone.ext4", 12.0, 460 * MIB, 830),
        record(ALLOCATED, 3.0, 420 * MIB, 805),
        record(BLOCKS, 2.9, 410 * MIB, 805),
    ]


def goals(records: list[Record]) -> dict[str, bool]:
    return {t.goal: t.met for t in evaluate(records)}


def test_all_targets_met_when_every_limit_holds() -> None:
    targets = evaluate(good_run())
    assert len(targets) == 18
    assert all(t.met for t in targets), target_lines(targets)
    assert all(line.startswith("PASS ") for line in target_lines(targets))


def test_each_limit_can_be_missed() -> None:
    cases: list[tuple[int, str, object, str]] = [
        (4, "seconds", 10.5, "allocated: wall time <= 2/3 of (2)"),
        (4, "source_bytes_read", 441 * MIB, "allocated: source bytes read <= 1.1 x needed bytes"),
        (4, "target_chunks", 811, f"allocated: {EXACT} <= trim"),
        (4, "needed_absent_chunks", 3, "allocated: exact on an encrypted launch"),
        (4, "encrypted_problems", ["fsck"], "allocated: faithful on an encrypted restore"),
        (5, "source_bytes_read", 431 * MIB, "allocated-blocks: source bytes read <= 1.1 x held"),
        (5, "target_chunks", 811, f"allocated-blocks: {EXACT}"),
        (5, "needed_absent_chunks", 1, "allocated-blocks: exact on an encrypted launch"),
        (5, "encrypted_problems", ["fsck"], "allocated-blocks: faithful on an encrypted restore"),
        (5, "outside_held_chunks", 1, "allocated-blocks: stores no chunk the source does not"),
    ]
    for index, attr, value, goal in cases:
        records = good_run()
        setattr(records[index], attr, value)
        missed = [g for g, met in goals(records).items() if not met]
        assert len(missed) == 1 and missed[0].startswith(goal), missed


def test_the_program_must_beat_every_peer() -> None:
    slower = good_run()
    slower[4].seconds = 11.0  # equal to e2image's: not faster
    missed = [g for g, met in goals(slower).items() if not met]
    assert "allocated: wall time < e2image's" in missed
    assert "allocated: wall time < partclone.ext4's" not in missed
    greedy = good_run()
    greedy[4].source_bytes_read = 451 * MIB  # more than e2image's 450
    assert not goals(greedy)["allocated: source bytes read <= best faithful peer's"]
    wide = good_run()
    wide[2].target_chunks = 804  # e2image writes fewer chunks
    assert not goals(wide)[PEER_CHUNKS]


def test_a_method_that_drops_needed_zero_blocks_is_charged_for_them() -> None:
    records = good_run()
    records[0].needed_absent_chunks = records[1].needed_absent_chunks = 10  # 820, 822 if exact
    records[2].needed_absent_chunks = records[3].needed_absent_chunks = 40  # 860, 870
    records[4].target_chunks = 815  # more than the trim method stores, fewer than it needs
    targets = {t.goal: t for t in evaluate(records)}
    assert (
        targets[f"allocated: {EXACT} <= trim method's (best of seed-bs512, seed-bs1M)"].limit == 820
    )
    assert targets[PEER_CHUNKS].limit == 860
    assert all(t.met for t in targets.values()), target_lines(list(targets.values()))
    records[0].outside_held_chunks = 9  # zeros written where the source holds nothing
    limit = {t.goal: t.limit for t in evaluate(records)}
    assert limit[f"allocated: {EXACT} <= trim method's (best of seed-bs512, seed-bs1M)"] == 811
    records[4].target_chunks, records[4].outside_held_chunks = 830, 25  # no block list: 805 held
    assert goals(records)[f"allocated: {EXACT} <= 1.02 x lower bound"]
    records[4].target_chunks, records[4].outside_held_chunks = 815, 0
    records[4].needed_absent_chunks = 6  # its own dropped chunks count against it too
    assert not goals(records)[
        f"allocated: {EXACT} <= trim method's (best of seed-bs512, seed-bs1M)"
    ]


def test_a_failed_peer_leaves_its_targets_missed_with_the_reason() -> None:
    records = good_run()
    records[2].error = "e2image exited 1"
    targets = {t.goal: t for t in evaluate(records)}
    assert not targets["allocated: wall time < e2image's"].met
    assert "e2image failed" in targets["allocated: wall time < e2image's"].note
    # the best of the remaining peers still counts
    assert targets["allocated: source bytes read <= best faithful peer's"].limit == 460 * MIB


def test_without_the_block_list_option_its_targets_are_missed_not_hidden() -> None:
    records = good_run()
    records[5] = Record("ext4", BLOCKS, GIB, 400 * MIB, 800, error="no --source-blocks (yet)")
    missed = {t.goal: t.note for t in evaluate(records) if not t.met}
    assert set(missed) == {
        "allocated-blocks: copy is faithful (table, raw bytes, fsck, files)",
        f"allocated-blocks: {EXACT} <= trim method's (best of seed-bs512, seed-bs1M)",
        "allocated-blocks: source bytes read <= 1.1 x held-and-needed + 1 MiB",
        *EXACT_GOALS[BLOCKS],
    }
    assert all("allocated-blocks failed" in note for note in missed.values())


def test_other_disks_compare_with_the_trim_method_and_the_block_list_bound() -> None:
    records = [
        record(SEED_1M, 2.0, GIB, 0, disk="empty", held_needed_bytes=0),
        record(ALLOCATED, 1.0, GIB, 0, disk="empty", held_needed_bytes=0),
        record(BLOCKS, 0.1, 0, 0, disk="empty", held_needed_bytes=0),
    ]
    targets = {t.goal: t for t in evaluate(records)}
    assert set(targets) == {
        "allocated: copy is faithful (table, raw bytes, fsck, files)",
        "allocated-blocks: copy is faithful (table, raw bytes, fsck, files)",
        f"allocated: {EXACT} <= trim method's (best of seed-bs1M)",
        f"allocated-blocks: {EXACT} <= trim method's (best of seed-bs1M)",
        "allocated-blocks: source bytes read <= 1.1 x held-and-needed + 1 MiB",
        "allocated-blocks: a never-written volume reads <= 1 MiB",
        *EXACT_GOALS[ALLOCATED],
        *EXACT_GOALS[BLOCKS],
    }
    assert all(t.met for t in targets.values())
    records[2].source_bytes_read = MIB + 512
    missed = [t.goal for t in evaluate(records) if not t.met]
    assert missed == [
        "allocated-blocks: source bytes read <= 1.1 x held-and-needed + 1 MiB",
        "allocated-blocks: a never-written volume reads <= 1 MiB",
    ]


def test_an_unfaithful_copy_misses_its_target_with_the_problem() -> None:
    records = good_run()
    records[4].verified, records[4].problems = False, ["test2 has different content"]
    (faithful, *_) = evaluate(records)
    assert not faithful.met and "test2" in faithful.note
    assert "test2" in target_lines([faithful])[0]


def test_results_round_trip_through_json_and_render_as_markdown(tmp_path: Path) -> None:
    records = good_run()
    targets = evaluate(records)
    path = tmp_path / "results.json"
    config = {
        "size_bytes": GIB,
        "date": "today",
        "cpus": 2,
        "kernel": "k",
        "program": "abc",
        "bench_seconds": 1.0,
    }
    save(path, config, records, targets)
    loaded_config, loaded, loaded_targets = load(path)
    assert loaded_config["size_bytes"] == GIB
    assert loaded == records and loaded_targets == targets
    table = markdown_table(rows(loaded))
    assert table.count("\n") == 1 + len(records)
    assert (
        "| ext4 | (3) sparsecopy --method allocated | 3.00 | 420.0 | 1,000.0 | 400.0 | 390.0 |"
        in table
    )
    text = markdown_report(loaded_config, loaded, loaded_targets)
    assert "18 of 18 targets met" in text and text.count("\n- PASS ") == 18


def test_an_unfaithful_peer_does_not_set_the_bar_and_is_named() -> None:
    records = good_run()
    records[2].target_chunks, records[2].source_bytes_read = 790, 300 * MIB
    records[2].verified, records[2].problems = False, ["backup superblocks differ"]
    targets = {t.goal: t for t in evaluate(records)}
    chunks = targets[PEER_CHUNKS]
    assert chunks.met and chunks.limit == 830
    assert chunks.note == "not counted, copy not faithful: e2image 790 chunks"
    reads = targets["allocated: source bytes read <= best faithful peer's"]
    assert reads.met and reads.limit == 460 * MIB and "e2image 300.00 MiB" in reads.note
    assert "not counted" in target_lines([chunks])[0]
    records[3].verified = False  # no faithful peer left: not measured, so missed
    targets = {t.goal: t for t in evaluate(records)}
    chunks = targets[PEER_CHUNKS]
    assert not chunks.met and "no peer made a faithful copy" in chunks.note
