"""Study storage: a journal left by a crash mid-write is recovered, other damage is named; database URLs fail with
one clear line."""
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from checks import finishes, release_fifo

from autotune.tuning.storage import StorageError, open_database, open_journal, redacted

ROOT = Path(__file__).resolve().parent.parent


def journal_with_trials(path: Path, n: int = 4) -> list[float]:
    storage = open_journal(path, report=lambda line: None)
    study = optuna.create_study(storage=storage, study_name="s")
    values = []
    for i in range(n):
        trial = study.ask()
        trial.suggest_int("x", 0, 10)
        study.tell(trial, float(i))
        values.append(float(i))
    return values


def completed(path: Path) -> list[float]:
    storage = open_journal(path, report=lambda line: None)
    study = optuna.load_study(study_name="s", storage=storage)
    return [t.value for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]


def test_an_incomplete_last_record_is_removed_and_every_complete_trial_kept(tmp_path):
    path = tmp_path / "gpu.journal"
    values = journal_with_trials(path)
    data = path.read_bytes()
    path.write_bytes(data + data.splitlines(keepends=True)[-1][:25])  # a record cut off mid-write, no line end
    notes = []
    open_journal(path, report=notes.append)
    assert len(notes) == 1 and "removed an incomplete last record" in notes[0] and str(path) in notes[0]
    assert path.read_bytes() == data
    assert completed(path) == values
    journal_with_trials(path.with_name("other.journal"))  # and the recovered file takes new records as before
    study = optuna.load_study(study_name="s", storage=open_journal(path, report=lambda line: None))
    study.tell(study.ask(), 9.0)
    assert completed(path) == values + [9.0]


def test_a_cut_off_last_record_of_a_real_trial_loses_only_that_record(tmp_path):
    path = tmp_path / "gpu.journal"
    values = journal_with_trials(path)
    data = path.read_bytes()
    path.write_bytes(data[:-9])  # the last record (the last trial's result) loses its end
    notes = []
    open_journal(path, report=notes.append)
    assert "incomplete last record" in notes[0]
    assert completed(path) == values[:-1]


@pytest.mark.parametrize("where", ["end", "middle"])
def test_other_damage_names_the_file_the_line_and_what_to_do(tmp_path, where):
    path = tmp_path / "gpu.journal"
    journal_with_trials(path)
    lines = path.read_bytes().splitlines(keepends=True)
    at = len(lines) if where == "end" else 2
    lines.insert(at, b"this is not a record\n")
    path.write_bytes(b"".join(lines))
    with pytest.raises(StorageError) as err:
        open_journal(path, report=lambda line: None)
    message = str(err.value)
    assert str(path) in message and f"line {at + 1} of {len(lines)}" in message
    assert "remove that line" in message and "move the file aside" in message


@pytest.mark.parametrize("record", [b'{"op_code": 99, "worker_id": "w"}', b'{"op_code": "x", "worker_id": "w"}',
                                    b'{"op_code": 4, "worker_id": "w"}',
                                    b'{"op_code": 5, "worker_id": "w", "trial_id": 0}'])
def test_a_json_record_optuna_cannot_apply_is_named_with_its_line(tmp_path, record):
    """Valid JSON with an op_code Optuna does not know, or without the fields its operation needs: Optuna stops on
    it with a bare AssertionError or KeyError; the run names the file, the line and what to do instead."""
    path = tmp_path / "gpu.journal"
    journal_with_trials(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(3, record + b"\n")
    path.write_bytes(b"".join(lines))
    with pytest.raises(StorageError) as err:
        open_journal(path, report=lambda line: None)
    message = str(err.value)
    assert str(path) in message and f"line 4 of {len(lines)} is a journal record Optuna cannot apply" in message
    assert "move the file aside" in message and "\n" not in message


def test_a_journal_that_is_not_a_regular_file_is_refused_not_waited_on(tmp_path):
    path = tmp_path / "gpu.journal"
    os.mkfifo(path)
    try:
        exc = finishes(lambda: open_journal(path, report=lambda line: None))
    finally:
        release_fifo(path)
    assert isinstance(exc, StorageError) and "not a regular file" in str(exc) and str(path) in str(exc), exc


def test_the_command_line_reports_a_damaged_journal_in_one_line(tmp_path):
    state = tmp_path / "state"
    path = state / "studies" / "cuda-simulator.journal"
    path.parent.mkdir(parents=True)
    create = b'{"op_code": 0, "worker_id": "x", "study_name": "s", "directions": [1]}\n'
    for damage, said in ((b"garbage\n", "line 2 of 2 is not a journal record"),
                         (b'{"op_code": 99, "worker_id": "x"}\n', "line 2 of 2 is a journal record Optuna cannot")):
        path.write_bytes(create + damage)
        out = subprocess.run([sys.executable, "-m", "autotune", "reduce", "--simulator", "--shape", "33",
                              "--state-dir", str(state), "--no-db"], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 2
        error = [line for line in out.stderr.splitlines() if line.startswith("autotune: error:")]
        assert error and said in error[0] and str(path) in error[0]
        assert "Traceback" not in out.stderr and "Should not reach" not in out.stderr.replace(error[0], "")


def test_a_missing_database_driver_is_named_with_the_install_command():
    with pytest.raises(StorageError) as err:
        open_database("postgresql+pg8000://tuner:secret@127.0.0.1/studies")
    assert "'pg8000' is not installed" in str(err.value) and 'pip install "autotune[postgres]"' in str(err.value)
    assert "secret" not in str(err.value)


def test_an_unreachable_server_is_one_line_without_the_password():
    pytest.importorskip("psycopg")
    with pytest.raises(StorageError) as err:
        open_database("postgresql://tuner:secret@127.0.0.1:1/studies")
    message = str(err.value)
    assert "cannot reach the database server" in message and "\n" not in message and "secret" not in message
    assert redacted("postgresql://tuner:secret@h/db") == "postgresql://tuner:***@h/db"


def test_refused_credentials_are_named(postgres_url):
    from sqlalchemy.engine import make_url

    url = make_url(postgres_url).set(username="nobody_here", password="wrong")
    with pytest.raises(StorageError, match="refused the credentials|does not exist"):
        open_database(url.render_as_string(hide_password=False))


def _open_at(url: str, start: float, name: str) -> str:
    """In a child: wait for ``start`` (a shared moment), then open the storage and the study as a tuner does."""
    import time

    from autotune.tuning.policy import make_sampler
    from autotune.tuning.storage import open_study

    while time.time() < start:
        time.sleep(0.001)
    try:
        open_study(open_database(url), name, make_sampler("random", 0), url=url)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def test_tuners_started_together_on_a_fresh_sqlite_file_all_open_it(tmp_path):
    """Four tuners opening a fresh SQLite file at the same moment race to create its tables and its schema-version
    row; the losers used to die (IntegrityError on alembic_version, or a table that already exists). They retry,
    and all open the one study."""
    import concurrent.futures as cf
    import multiprocessing as mp
    import time

    url = f"sqlite:///{tmp_path}/studies.db"
    with cf.ProcessPoolExecutor(4, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(abs, range(4)))  # every process started and imported before the shared moment is set
        start = time.time() + 3.0
        results = list(pool.map(_open_at, [url] * 4, [start] * 4, ["s"] * 4))
    assert results == ["ok"] * 4, results
    assert optuna.get_all_study_names(url) == ["s"]


def test_a_missing_sqlite_folder_is_named_at_once(tmp_path):
    start = __import__("time").monotonic()
    with pytest.raises(StorageError, match="cannot open the database file .*does its folder exist"):
        open_database(f"sqlite:///{tmp_path}/missing/studies.db")
    assert __import__("time").monotonic() - start < 2.0  # not retried as a start-up race
