"""devtools/tests_alone.py: which files, how a file alone is run, and how its outcome is judged."""

from __future__ import annotations

from pathlib import Path

from devtools.tests_alone import (
    KNOWN_FAILING,
    SLOW,
    Outcome,
    all_test_files,
    choose,
    failed_tests,
    judge,
    run_alone,
)

FILES = [f"tests/test_{i:02}.py" for i in range(40)]


def test_the_sample_is_the_same_for_the_same_seed_and_differs_across_seeds() -> None:
    first = choose(FILES, 5, "abc123")
    assert first == choose(list(reversed(FILES)), 5, "abc123")
    assert len(set(first)) == 5 and first == sorted(first)
    assert {tuple(choose(FILES, 5, str(seed))) for seed in range(10)} != {tuple(first)}
    assert choose(FILES, 100, "x") == FILES


def test_every_test_file_is_found_and_the_lists_name_real_ones() -> None:
    files = all_test_files()
    assert "tests/devtools/test_tests_alone.py" in files
    assert all(Path(f).name.startswith("test_") for f in files)
    assert set(SLOW) <= set(files)
    assert {node.split("::", 1)[0] for node in KNOWN_FAILING} <= set(files)
    assert all(SLOW.values()) and all(KNOWN_FAILING.values())


def test_failed_tests_are_read_from_pytest_s_summary() -> None:
    output = (
        "..F.E\n"
        "=========================== short test summary info ============================\n"
        "FAILED tests/a.py::test_one - AssertionError: assert 1 == 2\n"
        "ERROR tests/a.py::test_two[x-y] - RuntimeError\n"
        "FAILED tests/a.py::Test::test_three\n"
        "1 failed, 3 passed\n"
    )
    assert failed_tests(output) == [
        "tests/a.py::test_one",
        "tests/a.py::test_two[x-y]",
        "tests/a.py::Test::test_three",
    ]


def test_judging_an_outcome() -> None:
    known = {"tests/a.py::test_known": "fails alone; being fixed"}
    assert judge(Outcome("tests/a.py", "ok", 1.0), {})[0]
    ok, lines = judge(Outcome("tests/a.py", "FAILED", 1.0, ["tests/a.py::test_new"]), known)
    assert not ok
    assert "    FAILED alone: tests/a.py::test_new" in lines
    assert any("passes alone now: tests/a.py::test_known" in line for line in lines)
    ok, lines = judge(Outcome("tests/a.py", "FAILED", 1.0, ["tests/a.py::test_known"]), known)
    assert ok
    assert lines[0].startswith("ok")
    assert "known to fail alone: tests/a.py::test_known" in lines[1]
    ok, lines = judge(Outcome("tests/a.py", "ok", 1.0), known)
    assert not ok  # the known failure passes now: its entry is to be removed
    assert not judge(Outcome("tests/a.py", "FAILED", 1.0, [], ["Traceback ..."]), {})[0]
    ok, lines = judge(Outcome("tests/b.py", "TIMEOUT", 9.0, [], ["..."]), {})
    assert not ok
    assert "killed after 9s" in lines[1]


def test_a_file_runs_in_its_own_pytest_process_with_a_timeout(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_pass.py").write_text("def test_ok():\n    assert True\n")
    (tmp_path / "tests" / "test_fail.py").write_text(
        "def test_alone():\n    assert 1 == 2\n\n\ndef test_ok():\n    pass\n"
    )
    (tmp_path / "tests" / "test_hang.py").write_text(
        "import time\n\n\ndef test_hangs():\n    time.sleep(60)\n"
    )
    assert run_alone("tests/test_pass.py", 60, tmp_path).status == "ok"
    failed = run_alone("tests/test_fail.py", 60, tmp_path)
    assert (failed.status, failed.failed) == ("FAILED", ["tests/test_fail.py::test_alone"])
    hung = run_alone("tests/test_hang.py", 3, tmp_path)
    assert hung.status == "TIMEOUT"
    assert hung.seconds < 30
