"""Model files: a fitted kernel ridge model as one JSON file, the map file plus the coefficients. No pickle.

Layout (version 1)::

    {
      "format": "streamrff.model",
      "version": 1,
      "kind": "kernel_ridge" | "kernel_ridge_classifier",
      "map": {...},                    the map file's document (streamrff.formats.map), as it is
      "alpha": 0.0015,                 the penalty used (alpha_)
      "n_samples": 1200,               rows the model was fitted on
      "target_ndim": 1 | 2,            predictions are (n,) for 1, (n, t) for 2
      "classes": null | {"dtype": "<i8", "values": [0, 1, 2]},
      "arrays": {                      as in a map file: little-endian bytes, base64, dtype and shape
        "coef": (D, t) <f8,            coefficients on the features, one column per target
        "intercept": (t,) <f8,
        "gcv_alphas", "gcv_scores", "gcv_df": (g,) <f8    the gcv_ table (scores may be inf)
      },
      "signature": {...},              optional: {"algorithm": "hmac-sha256", "value": hex}, see below
      "digest": "..."                  sha256 of the canonical JSON of every other key
    }

A model saved with a signing key (``save_model(..., signing_key=key)``, CLI
``ridge --sign-key FILE`` or ``$STREAMRFF_SIGNING_KEY``) carries
``signature.value = HMAC-SHA256(key, "streamrff.model signature v1\\n" + sha256
hex of the canonical JSON of every key but the digest and the signature)``, the
rule of sketch signatures (docs/security.rst; a model's arrays are inside the
document, so no separate checksums). The digest then covers the signature, so
readers that know nothing of signatures still verify the file, and unsigned
model files written before signatures load as they did.
``load_model(..., verify_key=key)`` (CLI ``predict --sign-key FILE``) refuses a
model that is unsigned, signed with another key or edited after signing, with
:class:`~streamrff.ModelSignatureError`.

Floats are written in Python's shortest round-trip form and arrays as their
bytes, so a loaded model predicts exactly (bit for bit) what the saved one did.
``classes`` keeps the labels' numpy dtype when they are integers, floats or
booleans; text labels (``<U``, an object array of strings or numpy's
``StringDType``) are stored as fixed-width text and load as a ``<U`` array.

:func:`load_model` reads at most :data:`MAX_MODEL_FILE_BYTES`, checks the
format name and version, the digest (which covers every value, so an edited
alpha or coefficient is refused), rebuilds the map as :func:`streamrff.load_map`
does (fingerprint compared), and checks every shape against the map and the
classes. Files are written to a temporary name and published in one step, as map
files are.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from typing import Any

import numpy as np

from .._base.validation import check_format_version
from .._files.bounded_read import read_regular_file
from .._files.signed import SIGNATURE_ALGORITHM, check_signature_record, check_signing_key
from ..errors import (
    InputError,
    MapFormatError,
    ModelFormatError,
    ModelSignatureError,
    SketchFormatError,
    SourceError,
    StreamRFFError,
)
from ..formats.map import _decode_array, _encode_array, _is_url, _local_path, _publish, map_from_json, map_to_json
from ..typing import PathOrURL, StorageOptions
from .estimators import KernelRidge, KernelRidgeClassifier

__all__ = ["MODEL_FORMAT_NAME", "MODEL_FORMAT_VERSION", "MAX_MODEL_FILE_BYTES", "save_model", "load_model"]

MODEL_FORMAT_NAME = "streamrff.model"
MODEL_FORMAT_VERSION = 1
#: Largest model file read: a map file's limit plus room for D x t coefficients.
MAX_MODEL_FILE_BYTES = 2**29
_KINDS = {"kernel_ridge": KernelRidge, "kernel_ridge_classifier": KernelRidgeClassifier}
_ARRAYS = ("coef", "intercept", "gcv_alphas", "gcv_scores", "gcv_df")
#: numpy dtypes of class labels a model file holds: integers, floats, booleans, fixed-width text.
_CLASS_DTYPE = re.compile(r"^(?:[<>|][iu][1248]|[<>|]f[48]|\|b1|[<>|]U[1-9][0-9]{0,5})$")


def _canonical_digest(document: dict[str, Any]) -> str:
    covered = {key: value for key, value in document.items() if key != "digest"}
    text = json.dumps(covered, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


#: Domain separation: a model signature is never valid as a sketch's, or any other HMAC of the same key.
_SIGNATURE_CONTEXT = b"streamrff.model signature v1\n"


def model_signature_value(document: dict[str, Any], key: bytes) -> str:
    """HMAC-SHA256 (hex) of the digest of every key of a model document but the digest and the signature."""
    covered = {name: value for name, value in document.items() if name not in ("digest", "signature")}
    message = _SIGNATURE_CONTEXT + _canonical_digest(covered).encode("ascii")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _check_model_signature(document: dict[str, Any], verify_key: bytes, target: str) -> None:
    """Refuse a model document not signed with ``verify_key`` (after its digest matched)."""
    check_signature_record(
        document.get("signature"), model_signature_value(document, verify_key), target, "model",
        "save_model(..., signing_key=...) or `streamrff ridge --sign-key FILE`", ModelSignatureError,
    )  # fmt: skip


def _encode_classes(classes: np.ndarray) -> dict[str, Any]:
    if classes.dtype.kind in "OT":  # Python strings, numpy's variable-width StringDType: stored as fixed-width text
        if not all(isinstance(label, str) for label in classes.tolist()):
            raise InputError(
                "A model file holds class labels that are numbers, booleans or text. Got an object array "
                f"with {sorted({type(label).__name__ for label in classes.tolist()})}; refit with labels of one of "
                "those types."
            )
        classes = np.array(classes.tolist(), dtype=str)
    if not _CLASS_DTYPE.match(classes.dtype.str):
        raise InputError(
            f"A model file holds class labels that are numbers, booleans or text. Got dtype {classes.dtype}; "
            "refit with labels of one of those types."
        )
    if classes.dtype.kind == "f" and not np.isfinite(classes).all():
        raise InputError(f"Class labels must be finite to be saved. Got {classes.tolist()}.")
    return {"dtype": classes.dtype.str, "values": classes.tolist()}


def model_to_json(model: KernelRidge | KernelRidgeClassifier, signing_key: bytes | None = None) -> str:
    """The model file's text for a fitted model (see the module docstring for the layout), signed if a key is given.

    Raises
    ------
    InputError
        If ``model`` is not a streamrff KernelRidge or KernelRidgeClassifier.
    NotFittedMapError
        If it is not fitted.
    """
    kind = next((name for name, cls in _KINDS.items() if type(model) is cls), None)
    if kind is None:
        raise InputError(
            "model must be a fitted streamrff.KernelRidge or streamrff.KernelRidgeClassifier. "
            f"Got {type(model).__name__}."
        )
    model._check_fitted()
    classes = _encode_classes(np.asarray(model.classes_)) if kind == "kernel_ridge_classifier" else None
    arrays = {
        "coef": np.asarray(model._coef_matrix, dtype=np.float64),
        "intercept": np.asarray(model._intercepts, dtype=np.float64),
        "gcv_alphas": np.asarray(model.gcv_["alphas"], dtype=np.float64),
        "gcv_scores": np.asarray(model.gcv_["scores"], dtype=np.float64),
        "gcv_df": np.asarray(model.gcv_["df"], dtype=np.float64),
    }
    document = {
        "format": MODEL_FORMAT_NAME,
        "version": MODEL_FORMAT_VERSION,
        "kind": kind,
        "map": json.loads(map_to_json(model.feature_map_, signing_key)),
        "alpha": float(model.alpha_),
        "n_samples": int(model.n_samples_),
        "target_ndim": int(model._target_ndim),
        "classes": classes,
        "arrays": {name: _encode_array(value) for name, value in arrays.items()},
    }
    if signing_key is not None:
        signing_key = check_signing_key(signing_key, "signing_key")
        document = json.loads(json.dumps(document, allow_nan=False))  # exactly what the file will hold
        signature = model_signature_value(document, signing_key)
        document["signature"] = {"algorithm": SIGNATURE_ALGORITHM, "value": signature}
    document["digest"] = _canonical_digest(document)
    return json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"


def save_model(
    model: KernelRidge | KernelRidgeClassifier,
    path_or_url: PathOrURL,
    storage_options: StorageOptions = None,
    overwrite: bool = False,
    signing_key: bytes | None = None,
) -> None:
    """Write a fitted kernel ridge model to a JSON model file: its map file plus the coefficients.

    Parameters
    ----------
    model : KernelRidge or KernelRidgeClassifier
        A fitted model.
    path_or_url, storage_options, overwrite
        As in :func:`~streamrff.save_map` (e.g. ``"model.json"`` or ``"s3://bucket/model.json"``).
    signing_key : bytes, optional
        Sign the model (at least 16 bytes; HMAC-SHA256, the rule of sketch
        signatures): ``load_model(path, verify_key=key)`` then proves a holder of
        the key wrote it. The key itself is never written.

    Raises
    ------
    InputError
        If ``model`` is not a KernelRidge or KernelRidgeClassifier, its class
        labels are not numbers, booleans or text, or ``signing_key`` is not bytes of
        at least 16.
    NotFittedMapError
        If ``model`` is not fitted.
    FileExistsError, SourceError, OutputError
        If the target exists and ``overwrite`` is False, or cannot be written
        (as for :func:`~streamrff.save_map`).

    Examples
    --------
    >>> import numpy as np, os, tempfile, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = np.sin(X[:, 0])
    >>> model = srf.KernelRidge(n_features=64, bandwidth=1.0).fit(X, y)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.json")
    >>> srf.save_model(model, path)
    >>> loaded = srf.load_model(path)
    >>> bool(np.array_equal(loaded.predict(X), model.predict(X))), loaded.alpha_ == model.alpha_
    (True, True)
    """
    text = model_to_json(model, signing_key)
    _publish(text.encode("utf-8"), os.fspath(path_or_url), storage_options, overwrite)


def _read_model_bytes(target: str, storage_options: StorageOptions) -> bytes:
    if _is_url(target):
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(target, **(storage_options or {}))
            if not fs.exists(root):
                raise ModelFormatError(f"No model file at {target}: the object does not exist. Check the URL.")
            if not fs.isfile(root):
                raise ModelFormatError(f"{target} is a folder (a sketch?), not a model file. Expected model JSON.")
            if fs.size(root) > MAX_MODEL_FILE_BYTES:
                raise ModelFormatError(f"{target} is larger than {MAX_MODEL_FILE_BYTES:,} bytes: not a model file.")
            return fs.cat_file(root)
        except StreamRFFError:
            raise
        except Exception as error:  # fsspec backends raise many types
            raise SourceError(f"Cannot read {target}: {type(error).__name__}: {error}") from error
    path = _local_path(target)
    if not path.exists():
        raise ModelFormatError(f"No model file at {path}: the path does not exist. Check the path.")
    if path.is_dir():
        raise ModelFormatError(
            f"{path} is a directory (a sketch?), not a model file. Expected a file written by "
            "`streamrff ridge` or streamrff.save_model."
        )
    try:  # a regular file only (not /dev/zero, not a FIFO), read up to the cap and no further
        return read_regular_file(path, MAX_MODEL_FILE_BYTES, "a model file")
    except SketchFormatError as error:
        raise ModelFormatError(str(error)) from None


def _decode_classes(entry: Any, target: str) -> np.ndarray:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "values"}:
        raise ModelFormatError(f"{target}: 'classes' must be an object with keys dtype and values.")
    dtype, values = entry["dtype"], entry["values"]
    if not isinstance(dtype, str) or not _CLASS_DTYPE.match(dtype) or not isinstance(values, list):
        raise ModelFormatError(
            f"{target}: 'classes' must hold a numpy dtype of numbers, booleans or text and a list of labels. "
            f"Got dtype {dtype!r}."
        )
    kind = np.dtype(dtype).kind
    accepted = {
        "i": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "u": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "f": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v),
        "b": lambda v: isinstance(v, bool),
        "U": lambda v: isinstance(v, str),
    }[kind]
    if not all(accepted(value) for value in values):
        raise ModelFormatError(f"{target}: 'classes' values do not match their dtype {dtype}.")
    try:
        classes = np.array(values, dtype=np.dtype(dtype))
    except (OverflowError, ValueError) as error:
        raise ModelFormatError(f"{target}: 'classes' values do not fit their dtype {dtype} ({error}).") from error
    if kind == "U" and [str(label) for label in classes] != values:
        raise ModelFormatError(f"{target}: 'classes' labels are longer than their dtype {dtype}.")
    if classes.size < 2 or not all(classes[i] < classes[i + 1] for i in range(classes.size - 1)):
        raise ModelFormatError(f"{target}: 'classes' must be at least 2 distinct labels, sorted.")
    return classes


def _positive_int(document: dict[str, Any], name: str, target: str) -> int:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelFormatError(f"{target}: {name!r} must be a positive integer. Got {value!r}.")
    return value


def model_from_json(
    text: str | bytes, target: str = "<model>", verify_key: bytes | None = None
) -> KernelRidge | KernelRidgeClassifier:
    """Rebuild and verify the model of a model file's text (the inverse of :func:`model_to_json`).

    Raises
    ------
    ModelFormatError
        On anything but a complete, untampered model file of a known version.
    ModelSignatureError
        If ``verify_key`` is given and the model is not signed with it.
    """
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelFormatError(
            f"{target} is not a streamrff model file: not JSON ({error}). Expected a file written by "
            "`streamrff ridge` or streamrff.save_model."
        ) from error
    found = document.get("format") if isinstance(document, dict) else type(document).__name__
    if found != MODEL_FORMAT_NAME:
        hint = (
            " It is a map file: fit a model on it with `streamrff ridge ... --map FILE`."
            if found == "streamrff.map"
            else ""
        )
        raise ModelFormatError(
            f"{target} is not a streamrff model file: expected format={MODEL_FORMAT_NAME!r}, got {found!r}.{hint} "
            "Pass a file written by `streamrff ridge` or streamrff.save_model."
        )
    check_format_version(document.get("version"), MODEL_FORMAT_VERSION, target, "model", ModelFormatError)
    try:
        digest_matches = document.get("digest") == _canonical_digest(document)
    except (TypeError, ValueError):  # NaN or values JSON cannot hold
        digest_matches = False
    if not digest_matches:
        raise ModelFormatError(
            f"{target}: the model does not match its digest (tampered or corrupt). Expected the file as "
            "saved; restore it from its source or fit the model again."
        )
    if verify_key is not None:
        _check_model_signature(document, verify_key, target)
    kind = document.get("kind")
    if kind not in _KINDS:
        raise ModelFormatError(f"{target}: unknown model kind {kind!r}; expected one of {sorted(_KINDS)}.")
    arrays = document.get("arrays")
    if not isinstance(arrays, dict) or set(arrays) != set(_ARRAYS):
        raise ModelFormatError(f"{target}: 'arrays' must hold exactly {list(_ARRAYS)}.")
    try:
        feature_map = map_from_json(json.dumps(document.get("map")), f"{target} (its map)")
        decoded = {name: _decode_array(name, arrays[name], target) for name in _ARRAYS}
    except MapFormatError as error:
        raise ModelFormatError(str(error)) from error
    if any(value.dtype != np.float64 for value in decoded.values()):
        raise ModelFormatError(f"{target}: every array of a model file is float64 ('<f8').")
    coef, intercept = decoded["coef"], decoded["intercept"]
    width = feature_map.n_features_out_
    if coef.ndim != 2 or coef.shape[0] != width or coef.shape[1] < 1 or intercept.shape != (coef.shape[1],):
        raise ModelFormatError(
            f"{target}: expected coef of shape ({width}, t) for the map's {width} features and intercept of "
            f"shape (t,). Got {coef.shape} and {intercept.shape}."
        )
    grid = decoded["gcv_alphas"]
    if (
        grid.ndim != 1
        or grid.size < 1
        or decoded["gcv_scores"].shape != grid.shape
        or decoded["gcv_df"].shape != grid.shape
    ):
        raise ModelFormatError(f"{target}: the gcv_ arrays must be three 1-D arrays of the same, non-zero length.")
    if not (np.isfinite(coef).all() and np.isfinite(intercept).all() and np.isfinite(grid).all()):
        raise ModelFormatError(f"{target}: the coefficients, intercepts and alphas must be finite.")
    alpha = document.get("alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (np.isfinite(alpha) and alpha > 0):
        raise ModelFormatError(f"{target}: 'alpha' must be a positive number. Got {alpha!r}.")
    n_samples = _positive_int(document, "n_samples", target)
    target_ndim = document.get("target_ndim")
    if target_ndim not in (1, 2) or isinstance(target_ndim, bool) or (target_ndim == 1 and coef.shape[1] != 1):
        raise ModelFormatError(f"{target}: 'target_ndim' must be 1 (one target) or 2. Got {target_ndim!r}.")
    classes = None
    if kind == "kernel_ridge_classifier":
        classes = _decode_classes(document.get("classes"), target)
        expected = 1 if classes.size == 2 else classes.size
        if coef.shape[1] != expected or target_ndim != 2:
            raise ModelFormatError(
                f"{target}: {classes.size} classes need {expected} coefficient column(s) of 2-D targets. "
                f"Got {coef.shape[1]} ({target_ndim}-D)."
            )
    elif document.get("classes") is not None:
        raise ModelFormatError(f"{target}: a kernel_ridge model has no classes. Got {document.get('classes')!r}.")

    model = _KINDS[kind](alpha=float(alpha), feature_map=feature_map)
    model.feature_map_ = feature_map
    model.n_features_in_ = feature_map.n_features_in_
    model.n_samples_ = n_samples
    model.alpha_ = float(alpha)
    model.gcv_ = {"alphas": decoded["gcv_alphas"], "scores": decoded["gcv_scores"], "df": decoded["gcv_df"]}
    model._coef_matrix = np.ascontiguousarray(coef)
    model._intercepts = intercept
    model._target_ndim = target_ndim
    if classes is not None:
        model.classes_ = classes
    return model


def load_model(
    path_or_url: PathOrURL, storage_options: StorageOptions = None, verify_key: bytes | None = None
) -> KernelRidge | KernelRidgeClassifier:
    """Read a model file written by :func:`save_model` (or ``streamrff ridge``), validating everything.

    The model is rebuilt with ``alpha`` set to the fitted ``alpha_`` and
    ``feature_map`` to the fitted map, so refitting it on new rows uses the same
    map and penalty. Its fitted attributes (``coef_``, ``intercept_``,
    ``alpha_``, ``gcv_``, ``feature_map_``, ``n_samples_``, ``n_features_in_``,
    ``classes_``) equal the saved model's bit for bit, and so do its predictions.

    Parameters
    ----------
    path_or_url : str or PathLike
        A local path, ``file://`` or fsspec URL.
    storage_options : dict, optional
        fsspec options for URLs. Never logged.
    verify_key : bytes, optional
        Accept only a model signed with this key (``save_model(..., signing_key=key)``).
        Without it the signature, if any, is not checked (the digest always is).

    Returns
    -------
    KernelRidge or KernelRidgeClassifier

    Raises
    ------
    ModelFormatError
        If the file is missing, too large, not a model file (a map file or a
        sketch is named as such), of a newer format version, or tampered with.
    ModelSignatureError
        If ``verify_key`` is given and the model is unsigned, signed with another
        key, or edited after signing.
    SourceError
        If a URL cannot be read.

    Examples
    --------
    >>> import numpy as np, os, tempfile, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); labels = np.where(X[:, 0] > 0, "right", "left")
    >>> model = srf.KernelRidgeClassifier(n_features=32, bandwidth=1.0).fit(X, labels)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.json")
    >>> srf.save_model(model, path)
    >>> loaded = srf.load_model(path)
    >>> loaded.classes_.tolist(), bool(np.array_equal(loaded.decision_function(X), model.decision_function(X)))
    (['left', 'right'], True)
    """
    target = os.fspath(path_or_url)
    if verify_key is not None:
        verify_key = check_signing_key(verify_key, "verify_key")
    return model_from_json(_read_model_bytes(target, storage_options), target, verify_key)
