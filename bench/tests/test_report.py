from pathlib import Path

from bench.methods import ALLOCATED, SEED_1M, SEED_512
from bench.report import Record, evaluate, load, markdown_table, rows, save, target_lines

GIB = 1 << 30


def record(method: str, seconds: float, read: int, chunks: int, **extra: object) -> Record:
    base = Record("ext4", method, GIB, allocated_bytes=400 << 20, lower_bound_chunks=800)
    base.seconds, base.source_bytes_read, base.target_chunks = seconds, read, chunks
    base.target_bytes_written, base.verified = chunks * 512 * 1024, True
    for key, value in extra.items():
        setattr(base, key, value)
    return base


def good_run() -> list[Record]:
    return [
        record(SEED_512, 30.0, GIB, 810),
        record(SEED_1M, 9.0, GIB, 812),
        record(ALLOCATED, 3.0, 420 << 20, 805),
    ]


def test_all_targets_met_when_every_limit_holds() -> None:
    targets = evaluate(good_run())
    assert len(targets) == 6
    assert all(t.met for t in targets), target_lines(targets)


def test_each_limit_can_be_missed() -> None:
    slow = good_run()
    slow[2].seconds = 6.5  # > 9 * 2/3
    greedy = good_run()
    greedy[2].source_bytes_read = 500 << 20  # > 1.1 * 400 MiB
    wide = good_run()
    wide[2].target_chunks = 811  # > best trim (810) but <= 1.02 * 800
    for records, goal in [
        (slow, "wall time <= 2/3 of (2)"),
        (greedy, "source bytes read <= 1.1 x allocated bytes"),
        (wide, "target chunks <= trim method's (best of (1), (2))"),
    ]:
        missed = [t.goal for t in evaluate(records) if not t.met]
        assert missed == [goal]


def test_an_unfaithful_copy_misses_the_first_target() -> None:
    records = good_run()
    records[2].verified, records[2].problems = False, ["test2 has different content"]
    (faithful, *_) = evaluate(records)
    assert not faithful.met and "test2" in faithful.note


def test_a_failed_method_leaves_its_targets_missed_not_hidden() -> None:
    records = good_run()
    records[2] = Record("ext4", ALLOCATED, GIB, 400 << 20, 800, error="exited 1: boom")
    targets = evaluate(records)
    assert not any(t.met for t in targets)
    assert all("allocated failed" in t.note for t in targets)
    lines = target_lines(targets)
    assert all(line.startswith("MISSED") for line in lines)


def test_results_round_trip_through_json_and_render_as_markdown(tmp_path: Path) -> None:
    records = good_run()
    targets = evaluate(records)
    path = tmp_path / "results.json"
    save(path, {"size_bytes": GIB, "date": "today"}, records, targets)
    config, loaded, loaded_targets = load(path)
    assert config["size_bytes"] == GIB
    assert loaded == records and loaded_targets == targets
    table = markdown_table(rows(loaded))
    assert table.count("\n") == 1 + len(records)
    assert "| ext4 | (3) sparsecopy --method allocated | 3.0 | 420.0 |" in table
