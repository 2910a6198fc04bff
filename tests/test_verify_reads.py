"""A key means every read verifies (issue 49 item 2): map files, monitor states, store records, models.

Per command and file kind: a signed input passes, a tampered one (a sum array or value edited and
every checksum, digest and crc recomputed, as an attacker who knows the format would) is refused
with status 1 and one line naming the file, and an unsigned one is refused unless
``--allow-unsigned``. The references are the documented HMAC formulas, recomputed here with
hashlib and hmac, and the files' bytes edited on disk.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import numpy as np
import pytest
import zarr

import streamrff as srf
from streamrff.errors import SketchFormatError, SketchSignatureError

KEY = b"site-A shared key: 9f2c71d04be8a6"
OTHER_KEY = b"site-B shared key: 11aa22bb33cc44"
ROWS = np.random.default_rng(11).normal(size=(200, 3))
BUCKET = 50


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def run(cli_main, monkeypatch, *args: str, key: bytes | None = KEY):
    """The CLI in process, with ``key`` in $STREAMRFF_SIGNING_KEY (None: unset)."""
    with monkeypatch.context() as patch:
        patch.delenv("STREAMRFF_SIGNING_KEY", raising=False)
        if key is not None:
            patch.setenv("STREAMRFF_SIGNING_KEY", key.decode())
        return cli_main(*args)


def assert_refused(result, *fragments: str) -> None:
    """Status 1, one line on stderr, no traceback, the fragments (file name, fix) in it, the key not."""
    code, _, err = result
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    for fragment in fragments:
        assert fragment in err, err
    assert KEY.decode() not in err


def rewrite_group_array(path: Path, name: str, change) -> None:
    """Edit array ``name`` of a zarr group and recompute its checksum and the attributes digest."""
    array = zarr.open_array(str(path / name), mode="r+")
    values = change(np.asarray(array[...]))
    array[...] = values
    document = json.loads((path / "zarr.json").read_text())
    attrs = document["attributes"]
    little = np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<"))
    attrs["checksums"][name] = hashlib.sha256(little.tobytes()).hexdigest()
    covered = {key: value for key, value in attrs.items() if key != "attributes_digest"}
    attrs["attributes_digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    (path / "zarr.json").write_text(json.dumps(document))


@pytest.fixture(scope="module")
def feature_map():
    return srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(ROWS)


@pytest.fixture()
def source(tmp_path):
    path = tmp_path / "rows.zarr"
    zarr.create_array(store=str(path), shape=ROWS.shape, dtype="f8", chunks=(BUCKET, 3))[...] = ROWS
    return str(path)


# -- map files -----------------------------------------------------------------------------------------------


def test_map_file_signature_is_the_documented_hmac(tmp_path, feature_map):
    path = tmp_path / "map.json"
    srf.save_map(feature_map, path, signing_key=KEY)
    document = json.loads(path.read_text())
    covered = {name: value for name, value in document.items() if name != "signature"}
    message = b"streamrff.map signature v1\n" + hashlib.sha256(canonical(covered).encode()).hexdigest().encode()
    assert document["signature"] == {"algorithm": "hmac-sha256", "value": hmac.new(KEY, message, "sha256").hexdigest()}
    assert srf.load_map(path, verify_key=KEY).fingerprint == feature_map.fingerprint
    assert srf.load_map(path).fingerprint == feature_map.fingerprint  # no key: the signature is not needed
    with pytest.raises(SketchSignatureError, match="does not match the verify key"):
        srf.load_map(path, verify_key=OTHER_KEY)


def signed_map_files(tmp_path: Path, feature_map) -> dict[str, Path]:
    """A signed map file, an unsigned one, and a tampered one: another map's document under the signature."""
    signed, unsigned, tampered = tmp_path / "signed.json", tmp_path / "unsigned.json", tmp_path / "tampered.json"
    srf.save_map(feature_map, signed, signing_key=KEY)
    srf.save_map(feature_map, unsigned)
    other = json.loads(srf.formats.map.map_to_json(srf.RFF(n_features=16, bandwidth=2.0, seed=0).fit(ROWS)))
    other["signature"] = json.loads(signed.read_text())["signature"]  # the other map is self-consistent
    tampered.write_text(json.dumps(other))
    return {"signed": signed, "unsigned": unsigned, "tampered": tampered}


@pytest.mark.parametrize(
    "command",
    [
        ["sketch", "{source}", "-o", "{out}"],
        ["kmeans", "{source}", "--clusters", "2", "--max-iter", "1", "-o", "{out}"],
        ["kpca", "{source}", "--components", "2", "-o", "{out}"],
        ["test", "{source}", "{source}"],
        ["ridge", "{source}", "--target", "{source}", "-o", "{out}"],
        ["store", "create", "{out}", "--bucket", "50"],
        ["info"],
    ],
    ids=lambda command: "-".join(command[:2]) if command[0] == "store" else command[0],
)
def test_every_map_option_verifies_with_a_key_set(tmp_path, feature_map, source, cli_main, monkeypatch, command):
    files = signed_map_files(tmp_path, feature_map)
    out = str(tmp_path / "out")

    def argv(map_file: Path) -> list[str]:
        filled = [part.format(source=source, out=out) for part in command]
        return filled + [str(map_file)] if command == ["info"] else filled + ["--map", str(map_file)]

    assert_refused(run(cli_main, monkeypatch, *argv(files["tampered"])), str(files["tampered"]), "does not match")
    assert_refused(run(cli_main, monkeypatch, *argv(files["unsigned"])), str(files["unsigned"]), "is not signed")
    assert not Path(out).exists()
    if command[0] in ("sketch", "store", "info", "kmeans"):  # these run to the end (the others share the loader)
        import shutil

        for map_file, extra in ((files["signed"], []), (files["unsigned"], ["--allow-unsigned"])):
            shutil.rmtree(out, ignore_errors=True)
            code, _, err = run(cli_main, monkeypatch, *argv(map_file), *extra)
            assert code == 0, err
        if command[0] == "sketch":  # the sketch made with the map is signed, and holds the map's fingerprint
            assert srf.load(out, verify_key=KEY).fingerprint == feature_map.fingerprint


def test_a_model_or_sketch_as_map_verifies_by_its_own_signature(tmp_path, feature_map):
    model = srf.KernelRidge(feature_map=feature_map).fit(ROWS, ROWS[:, 0])
    srf.save_model(model, tmp_path / "signed.model", signing_key=KEY)
    srf.save_model(model, tmp_path / "unsigned.model")
    assert srf.load_map(tmp_path / "signed.model", verify_key=KEY).fingerprint == feature_map.fingerprint
    with pytest.raises(SketchSignatureError, match="is not signed"):
        srf.load_map(tmp_path / "unsigned.model", verify_key=KEY)
    sketch = srf.sketch_array(ROWS, feature_map)
    sketch.save(tmp_path / "signed.sketch", signing_key=KEY)
    sketch.save(tmp_path / "tampered.sketch", signing_key=KEY)
    rewrite_group_array(tmp_path / "tampered.sketch", "feature_sum", lambda values: values + 1.0)
    assert srf.load(tmp_path / "tampered.sketch").count == len(ROWS)  # the digest alone cannot tell
    assert srf.load_map(tmp_path / "signed.sketch", verify_key=KEY).fingerprint == feature_map.fingerprint
    with pytest.raises(SketchSignatureError, match="tampered.sketch"):
        srf.load_map(tmp_path / "tampered.sketch", verify_key=KEY)


# -- predict ---------------------------------------------------------------------------------------------------


def test_predict_verifies_signed_models_and_refuses_tampered_ones(tmp_path, feature_map, source, cli_main, monkeypatch):
    model = srf.KernelRidge(feature_map=feature_map).fit(ROWS, ROWS[:, 0])
    signed, unsigned, tampered = (tmp_path / f"{name}.model" for name in ("signed", "unsigned", "tampered"))
    srf.save_model(model, signed, signing_key=KEY)
    srf.save_model(model, unsigned)
    document = json.loads(signed.read_text())
    coef = document["arrays"]["coef"]
    values = np.frombuffer(__import__("base64").b64decode(coef["data"]), dtype=coef["dtype"]) * 2.0
    coef["data"] = __import__("base64").b64encode(values.astype(coef["dtype"]).tobytes()).decode()
    covered = {name: value for name, value in document.items() if name != "digest"}
    document["digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    tampered.write_text(json.dumps(document))
    out = tmp_path / "p.zarr"
    code, _, err = run(cli_main, monkeypatch, "predict", str(signed), source, "-o", str(out))
    assert code == 0, err
    expected = feature_map.transform(ROWS) @ model.coef_ + model.intercept_
    np.testing.assert_allclose(zarr.open_array(str(out))[...], expected, rtol=1e-5, atol=1e-6)
    assert_refused(run(cli_main, monkeypatch, "predict", str(tampered), source, "-o", str(tmp_path / "t.zarr")),
                   str(tampered), "signature does not match")  # fmt: skip
    assert_refused(run(cli_main, monkeypatch, "predict", str(unsigned), source, "-o", str(tmp_path / "u.zarr")),
                   str(unsigned), "is not signed")  # fmt: skip
    assert not (tmp_path / "t.zarr").exists() and not (tmp_path / "u.zarr").exists()
    code, _, err = run(cli_main, monkeypatch, "predict", str(unsigned), source, "-o", str(tmp_path / "u.zarr"),
                       "--allow-unsigned")  # fmt: skip
    assert code == 0, err


# -- monitor states and watch --reference -----------------------------------------------------------------------


def test_monitor_state_signature_is_the_sketch_rule_and_refuses_edits(tmp_path):
    monitor = srf.DriftMonitor(window=20, ert=100, n_features=16, n_streams=200, seed=0).fit(ROWS)
    path = tmp_path / "state"
    monitor.save(path, signing_key=KEY)
    attrs = json.loads((path / "zarr.json").read_text())["attributes"]
    covered = {name: value for name, value in attrs.items() if name not in ("attributes_digest", "signature")}
    message = (
        b"streamrff.sketch signature v1\n" + hashlib.sha256(canonical(covered).encode()).hexdigest().encode()
        + b"\n" + canonical(attrs["checksums"]).encode()
    )  # fmt: skip
    assert attrs["signature"] == {"algorithm": "hmac-sha256", "value": hmac.new(KEY, message, "sha256").hexdigest()}
    np.testing.assert_array_equal(srf.load_monitor(path, verify_key=KEY).reference_sum_, monitor.reference_sum_)
    rewrite_group_array(path, "reference_sum", lambda values: values * 0.5)
    assert srf.load_monitor(path).reference_count_ == monitor.reference_count_  # the digest alone cannot tell
    with pytest.raises(SketchSignatureError, match="signature does not match"):
        srf.load_monitor(path, verify_key=KEY)
    monitor.save(tmp_path / "unsigned")
    with pytest.raises(SketchSignatureError, match="is not signed"):
        srf.load_monitor(tmp_path / "unsigned", verify_key=KEY)


def test_watch_verifies_its_reference_and_signs_its_state(tmp_path, feature_map, source, cli_main, monkeypatch):
    reference = tmp_path / "ref.sketch"
    srf.sketch_array(ROWS, feature_map, moments=True).save(reference, signing_key=KEY)
    state = tmp_path / "state"
    base = ["watch", source, "--window", "20", "--ert", "100", "--streams", "50", "--json"]
    code, _, err = run(cli_main, monkeypatch, *base, "--reference", str(reference), "--save-monitor", str(state))
    assert code == 0, err
    assert srf.load_monitor(state, verify_key=KEY).n_rows_seen_ == len(ROWS)  # signed with the key it ran under
    resume = ["watch", source, "--reference", str(state), "--restart", "--json"]
    code, _, err = run(cli_main, monkeypatch, *resume)
    assert code == 0, err
    rewrite_group_array(state, "window_sum", lambda values: values + 1.0)
    assert_refused(run(cli_main, monkeypatch, *resume), str(state), "signature does not match")
    rewrite_group_array(reference, "feature_sum", lambda values: values + 1.0)
    assert_refused(run(cli_main, monkeypatch, *base, "--reference", str(reference)), str(reference), "signature")
    unsigned = tmp_path / "unsigned.sketch"
    srf.sketch_array(ROWS, feature_map, moments=True).save(unsigned)
    assert_refused(run(cli_main, monkeypatch, *base, "--reference", str(unsigned)), str(unsigned), "is not signed")
    code, _, err = run(cli_main, monkeypatch, *base, "--reference", str(unsigned), "--allow-unsigned")
    assert code == 0, err
    unsigned_state = tmp_path / "unsigned-state"  # a state saved without a key: refused unless allowed
    srf.DriftMonitor(window=20, ert=100, n_features=16, n_streams=50, seed=0).fit(ROWS).save(unsigned_state)
    resume = ["watch", source, "--reference", str(unsigned_state), "--json"]
    assert_refused(run(cli_main, monkeypatch, *resume), str(unsigned_state), "is not signed", "watch --sign-key")
    code, _, err = run(cli_main, monkeypatch, *resume, "--allow-unsigned")
    assert code == 0, err


# -- the store ----------------------------------------------------------------------------------------------------


def store_with_records(
    tmp_path: Path, feature_map, name: str, key: bytes | None, bucket: int = BUCKET
) -> srf.SketchStore:
    """A store of ROWS at ``tmp_path / name``: appended once per module and bucket size, then copied."""
    import shutil

    made = _STORES.get((key, bucket, feature_map.fingerprint))
    if made is None:
        made = _STORES["base"] / f"s{len(_STORES)}.store"
        srf.SketchStore.create(made, feature_map, bucket=bucket, signed=key is not None).append(ROWS, signing_key=key)
        _STORES[(key, bucket, feature_map.fingerprint)] = made
    shutil.copytree(made, tmp_path / name)
    return srf.SketchStore.open(tmp_path / name)


_STORES: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _store_cache(tmp_path_factory):
    """The stores appended once for this module (pytest's temporary folders, removed as usual)."""
    _STORES["base"] = tmp_path_factory.mktemp("stores")
    yield
    _STORES.clear()


def tamper_record(path: Path, slot: int, column: int, delta: float) -> None:
    """Add ``delta`` to one value of a record and recompute its crc32c (only the HMAC can tell)."""
    import google_crc32c

    record = path / "records" / "c" / str(slot) / "0"
    row = np.frombuffer(record.read_bytes()[:-4], dtype="<f8").copy()
    row[column] += delta
    payload = row.tobytes()
    record.write_bytes(payload + np.uint32(google_crc32c.value(payload)).astype("<u4").tobytes())


def test_store_records_are_bound_to_their_store_and_grid(tmp_path, feature_map):
    store = store_with_records(tmp_path, feature_map, "a.store", KEY)
    opened = srf.SketchStore.open(store.path, verify_key=KEY)
    exact = feature_map.transform(ROWS[BUCKET : 3 * BUCKET]).astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(opened.range(BUCKET, 3 * BUCKET).feature_sum, exact, rtol=1e-5, atol=1e-4)
    # The documented HMAC: context, then "<fingerprint> <bucket rows> <levels>\n", then the row, signature zeroed.
    row = np.frombuffer((Path(store.path) / "records/c/0/0").read_bytes()[:-4], dtype="<f8").copy()
    words = row[16:24].astype(">u4").tobytes()
    row[16:24] = 0.0
    binding = f"{feature_map.fingerprint} {BUCKET} {store._root.levels}\n".encode()
    assert words == hmac.new(KEY, b"streamrff.sketch-store record v1\n" + binding + row.tobytes(), "sha256").digest()
    # A signed record copied from a store of another map is refused, naming the bucket.
    other = store_with_records(tmp_path, srf.RFF(n_features=16, bandwidth=3.0, seed=0).fit(ROWS), "b.store", KEY)
    (Path(store.path) / "records/c/1/0").write_bytes((Path(other.path) / "records/c/1/0").read_bytes())
    with pytest.raises(SketchSignatureError, match=r"buckets 1\.\.1 \(level 0\)"):
        srf.SketchStore.open(store.path, verify_key=KEY).range(BUCKET, 2 * BUCKET)


@pytest.mark.parametrize("subcommand", ["info", "range", "test", "series", "append", "merge"])
def test_store_commands_verify_records_with_a_key_set(tmp_path, feature_map, source, cli_main, monkeypatch, subcommand):
    signed, unsigned, tampered = (
        store_with_records(tmp_path, feature_map, f"{name}.store", key, bucket=20)
        for name, key in (("signed", KEY), ("unsigned", None), ("tampered", KEY))
    )  # 10 buckets of 20 rows
    tamper_record(Path(tampered.path), tampered._root.slot(0, 2), 32, 1.0)  # bucket 2's first feature sum
    tamper_record(Path(tampered.path), tampered._root.slot(3, 0), 32, 1.0)  # and the rollup of buckets 0..7
    out = str(tmp_path / "out")
    arguments = {
        "info": [], "range": ["-o", out], "test": ["--a", "0:100", "--b", "100:200", "--permutations", "19"],
        "series": ["--reference", "0:120", "--every", "2", "--permutations", "19"], "append": [source],
        "merge": ["-o", out],
    }[subcommand]  # fmt: skip

    def argv(store: srf.SketchStore) -> list[str]:
        return ["store", subcommand, store.path, *arguments]

    assert_refused(run(cli_main, monkeypatch, *argv(tampered)), tampered.path, "is not signed with the verify key")
    assert_refused(run(cli_main, monkeypatch, *argv(unsigned)), unsigned.path, "is not signed", "--allow-unsigned")
    assert not Path(out).exists()
    code, _, err = run(cli_main, monkeypatch, *argv(signed))
    assert code == 0, err
    if subcommand in ("range", "merge"):
        verified = srf.SketchStore.open(out, verify_key=KEY).range() if subcommand == "merge" else srf.load(out)
        exact = feature_map.transform(ROWS).astype(np.float64).sum(axis=0)
        np.testing.assert_allclose(verified.feature_sum, exact, rtol=1e-5, atol=1e-4)
        if subcommand == "range":
            srf.load(out, verify_key=KEY)  # the output is signed too
        import shutil

        shutil.rmtree(out)
    code, _, err = run(cli_main, monkeypatch, *argv(unsigned), "--allow-unsigned")
    assert code == 0, err


# -- store records from a stranger (issue 49 item 5) --------------------------------------------------------------


def _attrs_edit(path: Path, **changes) -> None:
    """Edit the store's group attributes and recompute their digest (a consistent forgery)."""
    document = json.loads((path / "zarr.json").read_text())
    attrs = document["attributes"]
    attrs.update(changes)
    covered = {key: value for key, value in attrs.items() if key != "attributes_digest"}
    attrs["attributes_digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    (path / "zarr.json").write_text(json.dumps(document))


def _deep(levels: int):
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"n_features": 10**12}, "n_features is 1000000000000"),
        ({"n_features": True}, "n_features is True"),
        ({"n_features": "64"}, "n_features is '64'"),
        ({"levels": 10**6}, "malformed bucket grid"),
        ({"levels": 2.5}, "malformed bucket grid"),
        ({"bucket": {"rows": 2**52}}, "malformed bucket grid"),
        ({"bucket": {"rows": -1}}, "malformed bucket grid"),
        ({"bucket": "50"}, "malformed bucket grid"),
        ({"signed": "yes"}, "'signed'"),
        ({"created_at": 5}, "'created_at'"),
        ({"map": _deep(5000)}, "not JSON"),
        ({"extra": _deep(100)}, "nest deeper than 32 levels"),
    ],
)
def test_store_root_fields_from_a_stranger_are_refused_in_one_line(tmp_path, feature_map, cli_main, monkeypatch,
                                                                  changes, fragment):  # fmt: skip
    store = store_with_records(tmp_path, feature_map, "s.store", None)
    if "map" in changes:  # a document too deep for the JSON parser itself: written by hand
        document = json.loads((Path(store.path) / "zarr.json").read_text())
        text = json.dumps(document).replace('"map": {', '"map": ' + "[" * 5000 + "]" * 5000 + ', "x": {', 1)
        (Path(store.path) / "zarr.json").write_text(text)
    else:
        _attrs_edit(Path(store.path), **changes)
    with pytest.raises(SketchFormatError, match=fragment.replace("(", r"\(").replace("*", r"\*")):
        srf.SketchStore.open(store.path)
    code, _, err = run(cli_main, monkeypatch, "store", "info", store.path, key=None)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err and store.path in err, err


@pytest.mark.parametrize(
    "column, value, fragment",
    [
        (2, 2.0**60, "out of range"),  # count past 2**53
        (4, -1.0, "out of range"),  # a negative sum of squared norms
        (24, 0.5, "signed flag"),
        (27, 1.0, "reserved"),
        (9, -3.0, "32-bit unsigned"),  # a digest word
        (17, 2.0**40, "32-bit unsigned"),  # a signature word
        (0, 3.0, "disagrees with the records"),  # the header names another level: the index disagrees
        (1, 0.0, "disagrees with the records"),  # another index
        (5, 7.0, "bucket grid"),  # first row off the grid
    ],
)
def test_store_record_headers_from_a_stranger_are_refused_naming_the_bucket(tmp_path, feature_map, column, value,
                                                                           fragment):  # fmt: skip
    store = store_with_records(tmp_path, feature_map, "s.store", None)
    slot = store._root.slot(0, 3)
    record = Path(store.path) / "records" / "c" / str(slot) / "0"
    row = np.frombuffer(record.read_bytes()[:-4], dtype="<f8").copy()
    tamper_record(Path(store.path), slot, column, value - row[column])
    with pytest.raises(SketchFormatError, match=fragment) as raised:
        srf.SketchStore.open(store.path).range(3 * BUCKET, 4 * BUCKET)
    assert "buckets 3..3 (level 0)" in str(raised.value) and "\n" not in str(raised.value)


def test_store_listing_and_record_files_from_a_stranger_are_bounded(tmp_path, feature_map):
    import os

    store = store_with_records(tmp_path, feature_map, "s.store", None)
    records = Path(store.path) / "records" / "c"
    # A record past the layout: the listing disagrees with the records array.
    (records / str(store._root.n_slots + 5)).mkdir()
    (records / str(store._root.n_slots + 5) / "0").write_bytes(b"x")
    with pytest.raises(SketchFormatError, match=f"slot {store._root.n_slots + 5:,}"):
        srf.SketchStore.open(store.path).info()
    (records / str(store._root.n_slots + 5) / "0").unlink()
    (records / str(store._root.n_slots + 5)).rmdir()
    # A record that declares a gigabyte (a sparse file) is refused without being read; a FIFO without a wait.
    huge = records / "1" / "0"
    huge.unlink()
    with open(huge, "wb") as handle:
        handle.truncate(2**30)
    with pytest.raises(SketchFormatError, match=r"buckets 1\.\.1 \(level 0\): .* holds 1,073,741,824 bytes"):
        srf.SketchStore.open(store.path).range(BUCKET, 2 * BUCKET)
    huge.unlink()
    os.mkfifo(huge)
    with pytest.raises(SketchFormatError, match=r"buckets 1\.\.1 \(level 0\): .*FIFO"):
        srf.SketchStore.open(store.path).range(BUCKET, 2 * BUCKET)
    # A map.json that declares another width than the root (or a map too large) is refused before it is built.
    document = json.loads((Path(store.path) / "map.json").read_text())
    for width, fragment in ((10**12, "declares a map of 1000000000000 features"), (2**24, "declares a map of")):
        document["spec"]["n_features"] = width
        (Path(store.path) / "map.json").write_text(json.dumps(document))
        with pytest.raises(SketchFormatError, match=fragment):
            srf.SketchStore.open(store.path)


# -- the store's root: an empty store has no record to bind it -------------------------------------------------


def forge_root(path: Path, new_map) -> None:
    """Replace a store's map (map.json and the root's spec and fingerprint), the digest recomputed: consistent."""
    from streamrff.formats.map import map_to_json

    document = json.loads((path / "zarr.json").read_text())
    attrs = document["attributes"]
    attrs["map"], attrs["fingerprint"] = json.loads(canonical(new_map.spec)), new_map.fingerprint
    covered = {name: value for name, value in attrs.items() if name != "attributes_digest"}
    attrs["attributes_digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    (path / "zarr.json").write_text(json.dumps(document))
    (path / "map.json").write_text(map_to_json(new_map))


def test_an_empty_store_root_is_signed_and_verified_at_open(tmp_path, feature_map, cli_main, monkeypatch):
    path = tmp_path / "empty.store"
    srf.SketchStore.create(path, feature_map, bucket=BUCKET, signed=True, signing_key=KEY)
    attrs = json.loads((path / "zarr.json").read_text())["attributes"]
    covered = {name: value for name, value in attrs.items() if name not in ("attributes_digest", "root_signature")}
    message = b"streamrff.sketch-store root v1\n" + hashlib.sha256(canonical(covered).encode()).hexdigest().encode()
    expected = hmac.new(KEY, message, "sha256").hexdigest()
    assert attrs["root_signature"] == {"algorithm": "hmac-sha256", "value": expected}
    assert srf.SketchStore.open(path, verify_key=KEY).feature_map.fingerprint == feature_map.fingerprint
    with pytest.raises(SketchSignatureError, match="root signature does not match"):
        srf.SketchStore.open(path, verify_key=OTHER_KEY)
    forge_root(path, srf.RFF(n_features=16, bandwidth=7.0, seed=3).fit(ROWS))  # no record to notice it
    srf.SketchStore.open(path)  # without a key the forgery is self-consistent: only the key can tell
    with pytest.raises(SketchSignatureError, match="root signature does not match"):
        srf.SketchStore.open(path, verify_key=KEY)
    assert_refused(run(cli_main, monkeypatch, "store", "info", str(path)), f"{path}/zarr.json", "root signature")


def test_an_empty_store_with_an_unsigned_root_is_refused_with_a_key(tmp_path, feature_map, cli_main, monkeypatch):
    path = tmp_path / "empty.store"
    srf.SketchStore.create(path, feature_map, bucket=BUCKET, signed=True)  # no key at creation
    with pytest.raises(SketchSignatureError, match="the store is empty and its root is not signed"):
        srf.SketchStore.open(path, verify_key=KEY)
    assert_refused(run(cli_main, monkeypatch, "store", "info", str(path)), f"{path}/zarr.json", "--allow-unsigned")
    code, _, err = run(cli_main, monkeypatch, "store", "info", str(path), "--allow-unsigned")
    assert code == 0, err
    # Records bind the root they were signed under: an unsigned root with records opens, and its records verify.
    filled = store_with_records(tmp_path, feature_map, "filled.store", KEY)
    assert srf.SketchStore.open(filled.path, verify_key=KEY).range(0, 2 * BUCKET).count == 2 * BUCKET


def test_a_root_whose_map_spec_is_not_its_map_file_is_refused_without_a_key(tmp_path, feature_map):
    path = tmp_path / "empty.store"
    srf.SketchStore.create(path, feature_map, bucket=BUCKET)
    document = json.loads((path / "zarr.json").read_text())
    attrs = document["attributes"]
    attrs["map"]["bandwidth"] = 99.0  # the root's spec edited, map.json (whose fingerprint is the root's) kept
    covered = {name: value for name, value in attrs.items() if name != "attributes_digest"}
    attrs["attributes_digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    (path / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(SketchFormatError, match=r"zarr.json: the map spec of the store's attributes is not the one"):
        srf.SketchStore.open(path)
