from pathlib import Path

import pytest

from bench.disk import Layout
from bench.methods import Job, sparsecopy_allocated
from bench.system import BenchError, Resources


def fake_program(tmp_path: Path, body: str) -> Job:
    program = tmp_path / "sparsecopy"
    program.mkdir()
    (program / "__main__.py").write_text("import sys\n" + body)
    layout = Layout("ext4", "gpt", 1 << 30, 1 << 20, (1 << 30) - (2 << 20))
    return Job(
        "/dev/src",
        "/dev/tgt",
        layout,
        tmp_path,
        tmp_path / "mnt",
        tmp_path / "log",
        jobs=4,
        res=Resources(),
        program=program,
    )


def test_the_summary_and_the_arguments_reach_the_log(tmp_path: Path) -> None:
    job = fake_program(
        tmp_path,
        'print("copy: 50%", sys.argv[1:], file=sys.stderr)\n'
        'print("noise")\nprint(\'{"source_bytes_read": 7}\')\n',
    )
    sparsecopy_allocated(job)
    log = job.log.read_text()
    assert "['copy', '/dev/src', '/dev/tgt', '--method', 'allocated', '--jobs', '4']" in log
    assert 'summary: {"source_bytes_read": 7}' in log


def test_a_failing_program_is_reported_with_its_last_stderr_line(tmp_path: Path) -> None:
    job = fake_program(
        tmp_path,
        'print("sparsecopy: target is smaller than source", file=sys.stderr)\nsys.exit(3)\n',
    )
    with pytest.raises(BenchError, match="exited 3: sparsecopy: target is smaller than source"):
        sparsecopy_allocated(job)


def test_a_missing_summary_is_an_error(tmp_path: Path) -> None:
    job = fake_program(tmp_path, 'print("done")\n')
    with pytest.raises(BenchError, match="not a JSON summary"):
        sparsecopy_allocated(job)
