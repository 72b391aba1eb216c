"""The streaming columnar readers give the same rows, facts and precision as the reader they
replaced (tests/legacy_logs.py, kept verbatim) on every real log we have. The one intended
difference: a last line without its newline is no longer read."""

from __future__ import annotations

import json
from pathlib import Path

import legacy_logs
import numpy as np
import pytest
from conftest import FIXTURES, REALRUNS

from rlwatch.errors import SourceError
from rlwatch.sources import logs

NOT_LOGS = {"SOURCE.md", "config.json", "wandb-summary.json", "wandb-config.yaml"}


def _real_logs() -> list[Path]:
    out = []
    for root in (REALRUNS, FIXTURES):
        for f in sorted(root.glob("*/*")) if root.exists() else []:
            if f.name in NOT_LOGS or f.suffix == ".wandb" or "tfevents" in f.name:
                continue
            if f.suffix in logs.LOG_SUFFIXES:
                out.append(f)
    return out


def _table(frame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = frame.data.sort_values(["tag", "step"], kind="stable")
    return d["tag"].astype(str).to_numpy(), d["step"].to_numpy(), d["value"].to_numpy()


@pytest.mark.parametrize("path", _real_logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_new_readers_match_the_old_one_on_real_logs(path: Path, tmp_path: Path) -> None:
    data = path.read_bytes()
    cut = tmp_path / path.name
    cut.write_bytes(data[: data.rfind(b"\n") + 1] if not data.endswith(b"\n") else data)
    if path.suffix == ".json":  # whole documents: a missing final newline is not a cut
        cut.write_bytes(data)
    try:
        old = legacy_logs.load_file(cut)
    except SourceError:
        pytest.skip("not a log the old reader read (new formats are tested on their own)")
    new = logs.load_file(path)
    (o,), (n,) = old.runs.values(), new.runs.values()
    assert n.source == o.source and n.decimals == o.decimals and n.hparams == o.hparams
    assert (n.framework, n.framework_version) == (o.framework, o.framework_version)
    ot, os_, ov = _table(old)
    nt, ns, nv = _table(new)
    assert (ot == nt).all() and (os_ == ns).all()
    np.testing.assert_array_equal(ov, nv)  # bit for bit, NaN where NaN
    assert [r.to_dict() for r in n.restarts] == [r.to_dict() for r in o.restarts]
    if not data.endswith(b"\n") and path.suffix != ".json":
        assert any("last line incomplete, not read" in w for w in n.warnings)


@pytest.mark.parametrize("fast_json", [True, False], ids=["orjson", "no-orjson"])
@pytest.mark.parametrize("arrow", [True, False], ids=["arrow", "no-pyarrow"])
@pytest.mark.parametrize(
    "kind",
    [
        "console",
        "jsonl",
        "jsonl-spaced",
        "jsonl-nulls",
        "jsonl-strings",
        "jsonl-bools",
        "jsonl-shapes",
        "flat-jsonl",
    ],
)
def test_columnar_paths_match_the_old_reader_on_verl_shaped_logs(
    kind: str, arrow: bool, fast_json: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orjson/Arrow/numpy block paths (taken on blocks of many plain lines) and the
    fallbacks used without orjson or pyarrow, against the old line-by-line reader, on logs in
    verl's shapes with hundreds of keys."""
    from rlwatch.sources.logs import _cols, _json, _verl

    monkeypatch.setattr(_cols, "BLOCK", 200_000)  # ~15 blocks: plain ones next to odd ones
    if not arrow:  # as if pyarrow were not installed
        monkeypatch.setattr(_verl, "_ARROW", False)
        monkeypatch.setattr(_json, "_VERL_ARROW", False)
        monkeypatch.setattr(_json, "_ARROW_JSON", False)
    if not fast_json:  # as if orjson were not installed
        monkeypatch.setattr(_json, "_fast_loads", json.loads)
        monkeypatch.setattr(_json, "_FastError", json.JSONDecodeError)
    import importlib.util
    import sys

    bench = Path(__file__).parent.parent / "bench" / "bench_logs.py"
    spec = importlib.util.spec_from_file_location("bench_logs", bench)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_logs"] = mod
    spec.loader.exec_module(mod)
    f = tmp_path / ("run.log" if kind == "console" else "run.jsonl")
    if kind == "console":
        mod.write_console(f, 3_000_000)
    else:
        mod.write_jsonl(f, 3_000_000, spaced=kind == "jsonl-spaced")
        lines = f.read_text().splitlines()
        if kind == "jsonl-nulls":
            lines[5] = lines[5].replace('"actor/entropy":', '"actor/entropy":null,"x":', 1)
        if kind == "jsonl-strings":
            lines[7] = lines[7].replace('"actor/entropy":', '"mode":"a,\\"b","x":', 1)
        if kind == "jsonl-bools":  # true/false are not numbers (not 1.0/0.0)
            lines[9] = lines[9].replace('"actor/entropy":', '"ok":true,"x":', 1)
            lines[3] = lines[3].replace('"actor/pg_loss":', '"actor/pg_loss":false,"y":', 1)
        if kind == "jsonl-shapes":  # val keys every 3rd record, a key order change, big ints
            for i in range(0, len(lines), 3):
                lines[i] = lines[i].replace("}}", ',"val/score":0.5,"val/n":12}}', 1)
            lines[10] = lines[10].replace('"actor/entropy":', '"z":2e400,"q":-0.0,"x":', 1)
            lines[11] = lines[11].replace('"actor/entropy":', f'"z":{10**30},"x":', 1)
        if kind == "flat-jsonl":
            lines = [json.dumps({"step": r["step"], **r["data"]}) for r in map(json.loads, lines)]
        f.write_text("\n".join(lines) + "\n")
    old, new = legacy_logs.load_file(f), logs.load_file(f)
    for a, b in zip(_table(old), _table(new), strict=True):
        np.testing.assert_array_equal(a, b)
    (o,), (n,) = old.runs.values(), new.runs.values()
    assert n.decimals == o.decimals and n.warnings == o.warnings
