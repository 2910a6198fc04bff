"""Signed sketches: an HMAC-SHA256 that proves who wrote a sketch, where the digest proves only that it is intact.

The reference for the signature is the formula of docs/security.rst, recomputed here from the
bytes of zarr.json with hashlib and hmac; the attacker edits files on disk as in issue 27
(an attribute changed and the digest recomputed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import streamrff as srf
from streamrff.formats.sketch import is_signed

ROWS = np.random.default_rng(5).normal(size=(30, 3))
KEY = b"site-A shared key: 9f2c71d04be8a6"
OTHER_KEY = b"site-B shared key: 11aa22bb33cc44"


def make_sketch(rows: np.ndarray = ROWS, moments: bool = False) -> srf.MeanSketch:
    return srf.sketch_array(rows, srf.RFF(n_features=16, seed=0), moments=moments)


def read_attrs(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())["attributes"]


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def rewrite_attrs(path: Path, **changes) -> None:
    """Edit attributes as an attacker who knows the format would: change them, recompute the digest."""
    document = json.loads((path / "zarr.json").read_text())
    attrs = document["attributes"]
    for name, value in changes.items():
        if value is None:
            attrs.pop(name, None)
        else:
            attrs[name] = value
    covered = {name: value for name, value in attrs.items() if name != "attributes_digest"}
    attrs["attributes_digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    (path / "zarr.json").write_text(json.dumps(document))


def test_signature_is_the_documented_hmac_of_digest_and_checksums(tmp_path):
    path = tmp_path / "s.sketch"
    make_sketch().save(path, signing_key=KEY)
    attrs = read_attrs(path)
    covered = {name: value for name, value in attrs.items() if name not in ("attributes_digest", "signature")}
    message = (
        b"streamrff.sketch signature v1\n"
        + hashlib.sha256(canonical(covered).encode()).hexdigest().encode()
        + b"\n"
        + canonical(attrs["checksums"]).encode()
    )
    assert attrs["signature"] == {"algorithm": "hmac-sha256", "value": hmac.new(KEY, message, "sha256").hexdigest()}
    # the digest covers the signature, so readers that know nothing of signatures verify the file
    without_digest = {name: value for name, value in attrs.items() if name != "attributes_digest"}
    assert attrs["attributes_digest"] == hashlib.sha256(canonical(without_digest).encode()).hexdigest()


@pytest.mark.parametrize("suffix", ["", ".zip"])
def test_signed_sketch_loads_with_its_key_and_without_one(tmp_path, suffix):
    sketch = make_sketch(moments=True)
    path = tmp_path / f"s.sketch{suffix}"
    sketch.save(path, signing_key=KEY)
    assert srf.load(path, verify_key=KEY) == sketch
    assert srf.load(path) == sketch
    assert is_signed(path)
    unsigned = tmp_path / f"u.sketch{suffix}"
    sketch.save(unsigned)
    assert not is_signed(unsigned)


def test_load_with_a_key_refuses_unsigned_and_wrongly_signed_sketches(tmp_path):
    unsigned, signed = tmp_path / "unsigned.sketch", tmp_path / "other.sketch"
    make_sketch().save(unsigned)
    make_sketch().save(signed, signing_key=OTHER_KEY)
    with pytest.raises(srf.SketchSignatureError, match=r"unsigned.sketch is not signed\. Expected a sketch signed"):
        srf.load(unsigned, verify_key=KEY)
    with pytest.raises(srf.SketchSignatureError, match="the signature does not match the verify key") as caught:
        srf.load(signed, verify_key=KEY)
    assert isinstance(caught.value, srf.SketchFormatError) and "\n" not in str(caught.value)


def test_an_edit_the_digest_cannot_see_is_refused_by_the_signature(tmp_path):
    # Issue 27 item 7: anyone can edit `count` and recompute the digest. The file still loads
    # without a key (the digest only proves the file is intact), never with one.
    path = tmp_path / "s.sketch"
    make_sketch().save(path, signing_key=KEY)
    rewrite_attrs(path, count=len(ROWS) + 1)
    assert srf.load(path).count == len(ROWS) + 1
    with pytest.raises(srf.SketchSignatureError, match="signature does not match"):
        srf.load(path, verify_key=KEY)


@pytest.mark.parametrize(
    "changes",
    [
        {"squared_norm_sum": 0.5},
        {"map": {"kind": "rff", "n_features_in": 3, "n_features": 16, "bandwidth": 2.0, "seed": 0}},
        {"signature": {"algorithm": "hmac-sha256", "value": "0" * 64}},
        {"signature": {"algorithm": "none", "value": ""}},
        {"signature": "forged"},
        {"signature": None},  # stripped: loads as unsigned, refused with a key
    ],
    ids=["scalar", "map spec", "zero signature", "algorithm none", "not a dict", "stripped"],
)
def test_any_attribute_edit_with_a_recomputed_digest_fails_verification(tmp_path, changes):
    path = tmp_path / "s.sketch"
    make_sketch().save(path, signing_key=KEY)
    rewrite_attrs(path, **changes)
    with pytest.raises(srf.SketchFormatError):  # the signature error, or an earlier format check
        srf.load(path, verify_key=KEY)


def test_an_array_swapped_with_its_checksum_fails_verification(tmp_path):
    # A signed sketch's arrays moved into another signed-looking file: the checksums are signed too.
    first, second = tmp_path / "first.sketch", tmp_path / "second.sketch"
    make_sketch(ROWS[:10]).save(first, signing_key=KEY)
    make_sketch(ROWS[10:]).save(second, signing_key=KEY)
    for name in ("feature_sum",):
        for file in (second / name).rglob("*"):
            if file.is_file():
                target = first / name / file.relative_to(second / name)
                target.write_bytes(file.read_bytes())
    rewrite_attrs(first, checksums=read_attrs(second)["checksums"], count=20)
    with pytest.raises(srf.SketchSignatureError):
        srf.load(first, verify_key=KEY)


@pytest.mark.parametrize("bad_key", [b"short", "a text key of 32 characters...."])
def test_bad_keys_are_refused_without_showing_them(tmp_path, bad_key):
    with pytest.raises(srf.InputError) as caught:
        make_sketch().save(tmp_path / "s.sketch", signing_key=bad_key)
    assert str(bad_key) not in str(caught.value) and "short" not in str(caught.value).split("Got")[1]
    assert not (tmp_path / "s.sketch").exists()


def test_read_signing_key_from_a_file_or_the_environment(tmp_path, monkeypatch):
    key_file = tmp_path / "site.key"
    key_file.write_bytes(KEY + b"\n")
    key_file.chmod(0o600)
    monkeypatch.setenv("STREAMRFF_SIGNING_KEY", KEY.decode())
    assert srf.read_signing_key(key_file) == KEY == srf.read_signing_key()
    monkeypatch.delenv("STREAMRFF_SIGNING_KEY")
    assert srf.read_signing_key() is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.key"
    big.write_bytes(b"k" * 5000)
    big.chmod(0o600)
    for path, expected in [
        (tmp_path / "missing.key", "Cannot read the signing key file"),
        (fifo, "is not a regular file"),  # would block a plain open()
        (big, "is over 4096 bytes"),
        (tmp_path, "not a regular file"),
    ]:
        with pytest.raises(srf.InputError, match=expected):
            srf.read_signing_key(path)


# -- the command line ----------------------------------------------------------------------------------


def run_cli(*args: str, key_in_environment: bool = False) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    environment.pop("STREAMRFF_SIGNING_KEY", None)
    if key_in_environment:
        environment["STREAMRFF_SIGNING_KEY"] = KEY.decode()
    return subprocess.run(
        [sys.executable, "-m", "streamrff.cli", *args], capture_output=True, text=True, timeout=300, env=environment
    )


def run_in_process(cli_main, monkeypatch, *args: str, key_in_environment: bool = False) -> subprocess.CompletedProcess:
    """``run_cli`` without an interpreter start: conftest's ``cli_main`` with the same environment."""
    with monkeypatch.context() as patch:
        patch.delenv("STREAMRFF_SIGNING_KEY", raising=False)
        if key_in_environment:
            patch.setenv("STREAMRFF_SIGNING_KEY", KEY.decode())
        code, out, err = cli_main(*args)
    return subprocess.CompletedProcess(["streamrff", *args], code, out, err)


def all_bytes(folder: Path) -> bytes:
    """Every byte under ``folder``, zip members decompressed."""
    data = b""
    for file in sorted(folder.rglob("*")):
        if file.is_file():
            data += file.read_bytes()
            if zipfile.is_zipfile(file):
                with zipfile.ZipFile(file) as archive:
                    data += b"".join(archive.read(name) for name in archive.namelist())
    return data


def test_cli_signs_verifies_and_requires_signatures_without_leaking_the_key(tmp_path, cli_main, monkeypatch):
    import zarr

    def run(*args: str, key_in_environment: bool = False) -> subprocess.CompletedProcess:
        return run_in_process(cli_main, monkeypatch, *args, key_in_environment=key_in_environment)

    stored = zarr.create_array(store=str(tmp_path / "x.zarr"), shape=ROWS.shape, chunks=(10, 3), dtype="f8")
    stored[...] = ROWS
    source = str(tmp_path / "x.zarr")
    key_file = tmp_path / "keys" / "site.key"
    key_file.parent.mkdir()
    key_file.write_bytes(KEY + b"\n")
    key_file.chmod(0o600)
    out = tmp_path / "out"
    out.mkdir()
    runs = {
        "sketch a": run("sketch", source, "--features", "16", "--sign-key", str(key_file), "-o", f"{out}/a.sketch"),
        # A process (the console script's interpreter) that takes its key from the environment.
        "sketch b (env)": run_cli("sketch", source, "--features", "16", "-o", f"{out}/b.zip", key_in_environment=True),
        "sketch unsigned": run("sketch", source, "--features", "16", "-o", f"{out}/u.sketch"),
    }
    runs["merge signed"] = run(
        "merge", f"{out}/a.sketch", f"{out}/b.zip", "--require-signed", "--sign-key", str(key_file),
        "-o", f"{out}/ab.sketch",
    )  # fmt: skip
    runs["info verified"] = run("info", f"{out}/ab.sketch", "--sign-key", str(key_file), "--json")
    runs["info unverified"] = run("info", f"{out}/ab.sketch")
    runs["info unsigned"] = run("info", f"{out}/u.sketch")
    for name, completed in runs.items():
        assert completed.returncode == 0, (name, completed.stderr)
    assert json.loads(runs["info verified"].stdout)["signature"] == "verified"
    assert json.loads(runs["info verified"].stdout)["count"] == 2 * len(ROWS)
    assert "  signature: not verified (pass --sign-key FILE)" in runs["info unverified"].stdout
    assert "signature" not in runs["info unsigned"].stdout
    assert srf.load(out / "ab.sketch", verify_key=KEY).count == 2 * len(ROWS)

    refused = {
        "unsigned input": run_cli(
            "merge", f"{out}/a.sketch", f"{out}/u.sketch", "--require-signed", "-o", f"{out}/x.sketch",
            key_in_environment=True,
        ),
        "info wrong key": run("info", f"{out}/u.sketch", key_in_environment=True),
    }  # fmt: skip
    for name, completed in refused.items():
        assert completed.returncode == 1, (name, completed.stderr)
        assert len(completed.stderr.strip().splitlines()) == 1 and "Traceback" not in completed.stderr, name
    assert "u.sketch is not signed" in refused["unsigned input"].stderr
    assert not (out / "x.sketch").exists()
    no_key = run("merge", f"{out}/a.sketch", "--require-signed", "-o", f"{out}/y.sketch")
    assert no_key.returncode == 2 and "--require-signed needs the key" in no_key.stderr

    # The key is in no file written, no output, and no command line (only the key file's path is).
    texts = [part for completed in (*runs.values(), *refused.values(), no_key) for part in (completed.stdout,
             completed.stderr, " ".join(map(str, completed.args)))]  # fmt: skip
    for secret in (KEY, KEY.hex().encode()):
        assert secret not in all_bytes(out)
        assert all(secret.decode() not in text for text in texts)


# -- secrets refused rather than half-used (issue 38) ---------------------------------------------------


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code != 0 and err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    assert KEY.decode() not in err


def write_key(path: Path, mode: int = 0o600) -> Path:
    path.write_bytes(KEY + b"\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("value", ["", "\n"])
def test_an_empty_signing_key_variable_is_an_error_not_no_key(tmp_path, monkeypatch, cli_main, value):
    # Issue 38: STREAMRFF_SIGNING_KEY= (set but empty) silently switched signing and verification off.
    make_sketch().save(tmp_path / "s.sketch")
    monkeypatch.setenv("STREAMRFF_SIGNING_KEY", value)
    with pytest.raises(srf.InputError, match=r"\$STREAMRFF_SIGNING_KEY is set but empty"):
        srf.read_signing_key()
    code, out, err = cli_main("info", str(tmp_path / "s.sketch"))
    assert_one_line_error(code, err, "streamrff info: error: $STREAMRFF_SIGNING_KEY is set but empty", "unset")
    code, out, err = cli_main("merge", str(tmp_path / "s.sketch"), "-o", str(tmp_path / "m.sketch"))
    assert_one_line_error(code, err, "is set but empty")
    assert not (tmp_path / "m.sketch").exists()
    monkeypatch.delenv("STREAMRFF_SIGNING_KEY")
    assert srf.read_signing_key() is None  # unset: no key


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644])
def test_a_key_file_open_to_group_or_others_is_refused_unless_allowed(tmp_path, monkeypatch, cli_main, mode):
    monkeypatch.delenv("STREAMRFF_SIGNING_KEY", raising=False)
    key_file = write_key(tmp_path / "site.key", mode)
    with pytest.raises(srf.InputError, match=rf"open to group or others \(mode 0{mode:o}\).*chmod 600"):
        srf.read_signing_key(key_file)
    assert srf.read_signing_key(key_file, allow_readable=True) == KEY
    make_sketch().save(tmp_path / "s.sketch", signing_key=KEY)
    code, out, err = cli_main("info", str(tmp_path / "s.sketch"), "--sign-key", str(key_file))
    assert_one_line_error(code, err, f"{key_file} is open to group or others", "--allow-readable-key")
    code, out, err = cli_main(
        "info", str(tmp_path / "s.sketch"), "--sign-key", str(key_file), "--allow-readable-key", "--json"
    )
    assert code == 0 and json.loads(out)["signature"] == "verified", err
    link = tmp_path / "mounted.key"  # mounted secrets are links: the mode checked is the key's own
    link.symlink_to(key_file)
    key_file.chmod(0o600)
    assert srf.read_signing_key(link) == KEY


def test_cli_merge_with_a_key_refuses_unverified_inputs_unless_sign_unverified(tmp_path, monkeypatch, cli_main):
    # Issue 38: `merge --sign-key` signed a merge of unverified inputs unless --require-signed was given.
    monkeypatch.delenv("STREAMRFF_SIGNING_KEY", raising=False)
    key_file = write_key(tmp_path / "site.key")
    signed, unsigned, other = tmp_path / "a.sketch", tmp_path / "u.sketch", tmp_path / "o.sketch"
    feature_map = srf.RFF(n_features=16, seed=0).fit(ROWS)
    srf.sketch_array(ROWS[:10], feature_map).save(signed, signing_key=KEY)
    srf.sketch_array(ROWS[10:], feature_map).save(unsigned)
    srf.sketch_array(ROWS[10:], feature_map).save(other, signing_key=OTHER_KEY)
    for name, suspect, fragment in [
        ("u", unsigned, "u.sketch is not signed"),
        ("o", other, "does not match the verify key"),
    ]:
        output = tmp_path / f"{name}-merged.sketch"
        code, out, err = cli_main("merge", str(signed), str(suspect), "--sign-key", str(key_file), "-o", str(output))
        assert_one_line_error(code, err, "streamrff merge: error: ", fragment, "--sign-unverified")
        assert not output.exists()
    output = tmp_path / "merged.sketch"
    code, out, err = cli_main(
        "merge", str(signed), str(unsigned), "--sign-key", str(key_file), "--sign-unverified", "-o", str(output)
    )
    assert code == 0, err
    merged = srf.load(output, verify_key=KEY)  # signed on purpose
    assert merged.count == len(ROWS) and np.allclose(
        merged.feature_sum, srf.sketch_array(ROWS, feature_map).feature_sum, rtol=1e-6
    )
    code, out, err = cli_main("merge", str(signed), "--sign-unverified", "-o", str(tmp_path / "x.sketch"))
    assert code == 2 and "--sign-unverified" in err and err.count("\n") == 1, err
    # Inputs that verify need no flag.
    code, out, err = cli_main(
        "merge", str(signed), str(signed), "--sign-key", str(key_file), "-o", str(tmp_path / "aa.sketch")
    )
    assert code == 0 and srf.load(tmp_path / "aa.sketch", verify_key=KEY).count == 20, err


# -- model files (issue 38) ---------------------------------------------------------------------------------


def fitted_model() -> srf.KernelRidge:
    return srf.KernelRidge(n_features=16, bandwidth=1.0, seed=0).fit(ROWS, np.sin(ROWS[:, 0]))


def rewrite_model(path: Path, **changes) -> None:
    """Edit a model file as an attacker who knows the format would: change keys, recompute the digest."""
    document = json.loads(path.read_text())
    document.update(changes)
    covered = {name: value for name, value in document.items() if name != "digest"}
    document["digest"] = hashlib.sha256(canonical(covered).encode()).hexdigest()
    path.write_text(json.dumps(document))


def test_model_signature_is_the_documented_hmac_and_verifies_only_with_its_key(tmp_path):
    model, signed, unsigned = fitted_model(), tmp_path / "signed.json", tmp_path / "unsigned.json"
    srf.save_model(model, signed, signing_key=KEY)
    srf.save_model(model, unsigned)
    document = json.loads(signed.read_text())
    covered = {name: value for name, value in document.items() if name not in ("digest", "signature")}
    message = b"streamrff.model signature v1\n" + hashlib.sha256(canonical(covered).encode()).hexdigest().encode()
    assert document["signature"] == {"algorithm": "hmac-sha256", "value": hmac.new(KEY, message, "sha256").hexdigest()}
    assert KEY not in signed.read_bytes() and "signature" not in json.loads(unsigned.read_text())
    for loaded in (srf.load_model(signed, verify_key=KEY), srf.load_model(signed), srf.load_model(unsigned)):
        assert np.array_equal(loaded.predict(ROWS), model.predict(ROWS))  # bit for bit
    with pytest.raises(srf.ModelSignatureError, match="unsigned.json is not signed"):
        srf.load_model(unsigned, verify_key=KEY)
    with pytest.raises(srf.ModelSignatureError, match="does not match the verify key"):
        srf.load_model(signed, verify_key=OTHER_KEY)
    rewrite_model(signed, alpha=document["alpha"] * 2)  # the digest cannot tell, the signature can
    assert srf.load_model(signed).alpha_ == 2 * model.alpha_
    with pytest.raises(srf.ModelSignatureError, match="edited after signing"):
        srf.load_model(signed, verify_key=KEY)
    with pytest.raises(srf.InputError, match="at least 16 bytes"):
        srf.save_model(model, tmp_path / "short.json", signing_key=b"short")
    assert not (tmp_path / "short.json").exists()


def test_cli_ridge_signs_and_predict_verifies_a_model_file(tmp_path, monkeypatch, cli_main):
    import zarr

    monkeypatch.delenv("STREAMRFF_SIGNING_KEY", raising=False)
    for name, values in (("x.zarr", ROWS), ("y.zarr", np.sin(ROWS[:, 0]))):
        zarr.create_array(store=str(tmp_path / name), shape=values.shape, dtype="f8", chunks=(10, *values.shape[1:]))[
            ...
        ] = values
    key_file = write_key(tmp_path / "site.key")
    model = tmp_path / "model.json"
    arguments = ["ridge", str(tmp_path / "x.zarr"), "--target", str(tmp_path / "y.zarr"), "--features", "16"]
    code, out, err = cli_main(*arguments, "--bandwidth", "1", "--sign-key", str(key_file), "-o", str(model))
    assert code == 0, err
    assert srf.load_model(model, verify_key=KEY).n_samples_ == len(ROWS)
    code, out, err = cli_main(
        "predict",
        str(model),
        str(tmp_path / "x.zarr"),
        "--sign-key",
        str(key_file),
        "-o",
        str(tmp_path / "p.zarr"),
    )
    assert code == 0, err
    assert np.allclose(zarr.open_array(str(tmp_path / "p.zarr"))[...], srf.load_model(model).predict(ROWS), rtol=1e-6)
    monkeypatch.setenv("STREAMRFF_SIGNING_KEY", OTHER_KEY.decode())
    code, out, err = cli_main("predict", str(model), str(tmp_path / "x.zarr"), "-o", str(tmp_path / "q.zarr"))
    assert_one_line_error(code, err, "streamrff predict: error: ", "does not match the verify key")
    assert not (tmp_path / "q.zarr").exists()


# -- a key means every read verifies (issue 49 item 2, issue 50 item 6) ------------------------------------------


def test_with_a_key_set_test_explain_and_ridge_refuse_a_tampered_sketch(tmp_path, monkeypatch, cli_main):
    # Issue 49: with the key set, `test --sketches` believed a signed sketch whose sums were edited
    # (an honest p = 1e-4 became p = 1.0); `ridge --sketches` signed a model made from tampered inputs.
    feature_map = srf.RFF(n_features=16, seed=0).fit(ROWS)
    first, second = tmp_path / "a.sketch", tmp_path / "b.sketch"
    srf.sketch_array(ROWS, feature_map, moments=True).save(first, signing_key=KEY)
    srf.sketch_array(ROWS + 3.0, feature_map, moments=True).save(second, signing_key=KEY)
    rewrite_attrs(second, count=len(ROWS) + 1)  # the digest recomputed: only the signature can tell
    import zarr

    zarr.save_array(str(tmp_path / "rows.zarr"), np.vstack([ROWS, ROWS + 3.0]))
    targets = ROWS[:, :1].copy()
    regression, tampered = tmp_path / "r.sketch", tmp_path / "t.sketch"
    srf.regression_sketch_array(ROWS, targets, feature_map).save(regression, signing_key=KEY)
    srf.regression_sketch_array(ROWS, targets, feature_map).save(tampered, signing_key=KEY)
    rewrite_attrs(tampered, count=len(ROWS) + 1)
    commands = [
        ("test", str(first), str(second)),
        ("explain", str(first), str(second), "--source", str(tmp_path / "rows.zarr")),
        ("ridge", str(regression), str(tampered), "-o", str(tmp_path / "m.model")),
    ]
    for command in commands:
        result = run_in_process(cli_main, monkeypatch, *command, key_in_environment=True)
        assert_one_line_error(result.returncode, result.stderr, f"streamrff {command[0]}: error: ", "signature")
    assert not (tmp_path / "m.model").exists()
    # --allow-unsigned accepts them on purpose; without a key nothing is verified.
    for command in commands[:2]:
        result = run_in_process(cli_main, monkeypatch, *command, "--allow-unsigned", key_in_environment=True)
        assert result.returncode == 0, result.stderr
        result = run_in_process(cli_main, monkeypatch, *command)
        assert result.returncode == 0, result.stderr
