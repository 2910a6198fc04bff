"""A map's identity without the estimator: the random parameters a spec determines, and the fingerprint.

Every oblivious map kind (``rff``, ``relative_rff``, ``jl``) draws its random
parameters from its spec alone; this module holds those draws, the
per-process cache of them, and the fingerprint (sha256 of the spec, the
parameters and the state arrays). It imports numpy and the foundations only,
not scikit-learn, so that reading a sketch file to describe or merge it
(``streamrff info``, ``streamrff merge``) checks the stored fingerprint without
building the scikit-learn estimator: :class:`MapIdentity` is what such a
reader holds in place of the map. The estimators (:mod:`.fourier`,
:mod:`.relative`, :mod:`.jl`) regenerate their parameters here too, so there
is one draw per kind. K-JL's parameters come from its fitted landmarks
(:mod:`.kjl`); it has no identity without its estimator.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from .._base.blas import single_blas_thread
from ..typing import MapSpec
from .categorical import draw_category_params
from .structured import draw_structured_params

__all__ = ["MapIdentity", "cached_params", "has_identity", "spec_fingerprint", "spec_key"]

#: SeedSequence spawn key of the JL projection stream (ASCII "JL-P"), distinct from the RFF stream.
JL_STREAM = 0x4A4C2D50
#: SeedSequence spawn key of RelativeErrorRFF's frequency stream (ASCII "RERF").
RELATIVE_RFF_STREAM = 0x52455246
#: Matern smoothness nu of each Matern family: frequencies are multivariate Student-t with 2 nu degrees of freedom.
MATERN_NU = {"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}


def spec_key(spec: MapSpec) -> str:
    """The spec as canonical JSON: the cache key of its parameters and the first part of its fingerprint."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def hash_arrays(digest: Any, arrays: dict[str, np.ndarray]) -> None:
    """Feed ``arrays`` to ``digest`` by name, each with its little-endian dtype and shape."""
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        digest.update(f"{name}:{little.dtype.str}:{little.shape}".encode())
        digest.update(little.tobytes())


def gaussian_frequencies(rng: np.random.Generator, n_rows: int, dim: int, orthogonal: bool) -> np.ndarray:
    """``n_rows`` frequency vectors in R^dim with N(0, I) marginals: the RFF frequencies at bandwidth 1.

    I.i.d. rows by default. With ``orthogonal=True`` they come in blocks of
    ``dim`` mutually orthogonal rows (QR of a Gaussian block, sign-corrected to
    be Haar), each row scaled by an independent chi(dim) norm: orthogonal
    random features (Yu et al. 2016).
    """
    if not orthogonal:
        return rng.standard_normal((n_rows, dim))
    blocks = []
    for _ in range(-(-n_rows // dim)):
        q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
        q *= np.sign(np.diag(r))
        norms = np.sqrt(rng.chisquare(dim, size=dim))
        blocks.append(q.T * norms[:, None])
    return np.concatenate(blocks)[:n_rows]


def kernel_frequencies(rng: np.random.Generator, n_rows: int, dim: int, spec: MapSpec) -> np.ndarray:
    """Frequencies at bandwidth 1 of the spec's kernel family (``kernel`` absent: Gaussian, as every older map).

    Gaussian: N(0, I) rows (:func:`gaussian_frequencies`). Laplace ``exp(-||x - y||_1)``: i.i.d.
    standard Cauchy entries (the kernel is a product over columns of ``exp(-|t|)``, whose spectrum is
    Cauchy). Matern nu: the Gaussian rows times ``sqrt(2 nu / g)``, g ~ chi^2(2 nu), one per row: a
    multivariate Student-t with 2 nu degrees of freedom, the spectrum of the Matern kernel of length 1.
    """
    kernel = spec.get("kernel", "gaussian")
    if kernel == "laplace":
        return rng.standard_cauchy((n_rows, dim))
    frequencies = gaussian_frequencies(rng, n_rows, dim, spec["orthogonal"])
    if kernel in MATERN_NU:
        nu = MATERN_NU[kernel]
        frequencies *= np.sqrt(2.0 * nu / rng.chisquare(2.0 * nu, size=n_rows))[:, None]
    return frequencies


def _rff_params(spec: MapSpec) -> dict[str, np.ndarray]:
    # One generator for frequencies, then phases: the order fixes every map ever saved.
    rng = np.random.default_rng(spec["seed"])
    n_frequencies = spec["n_features"] // 2 if spec["variant"] == "sincos" else spec["n_features"]
    if spec.get("structured", False):
        params = draw_structured_params(rng, spec["n_features_in"], n_frequencies, spec["bandwidth"])
    else:
        numeric_width = spec["n_features_in"] - len(spec.get("categorical", ()))
        frequencies = kernel_frequencies(rng, n_frequencies, numeric_width, spec)
        params = {"frequencies": frequencies / spec["bandwidth"]}
    if spec["variant"] == "cosphase":
        params["phases"] = rng.uniform(0.0, 2.0 * np.pi, size=spec["n_features"])
    if spec.get("categorical"):
        params.update(draw_category_params(rng, n_frequencies, len(spec["categorical"]), spec["mismatch"]))
    return params


def relative_rff_gamma(n_features_in: int, alpha: float, eps: float) -> float:
    """Half-width of the frequency box of RelativeErrorRFF (Phillips & Tai 2018, sec. 2).

    ``gamma = sqrt(4 ln(16 d / (sqrt(pi) eps alpha)))``, which bounds the
    truncation bias of every kernel value by ``eps alpha / 4`` (their Lemma 13).
    """
    return float(np.sqrt(4.0 * np.log(16.0 * n_features_in / (np.sqrt(np.pi) * eps * alpha))))


def _relative_rff_params(spec: MapSpec) -> dict[str, np.ndarray]:
    d = spec["n_features_in"]
    m = spec["n_features"] // 2
    gamma = relative_rff_gamma(d, spec["alpha"], spec["eps"])
    rng = np.random.default_rng(np.random.SeedSequence(spec["seed"], spawn_key=(RELATIVE_RFF_STREAM,)))
    frequencies = rng.uniform(-gamma, gamma, size=(m, d))
    # Weights in log space: (2 gamma)^(d/2) overflows for large d while exp(-||v||^2/8) underflows.
    log_weights = (
        0.5 * d * np.log(2.0 * gamma)
        - 0.25 * d * np.log(4.0 * np.pi)
        - np.einsum("ij,ij->i", frequencies, frequencies) / 8.0
        - 0.5 * np.log(m)
    )
    return {
        "frequencies": frequencies / (spec["bandwidth"] * np.sqrt(2.0)),  # <v, x'> = <v / (sigma sqrt 2), x>
        "weights": np.exp(log_weights),
    }


def _jl_params(spec: MapSpec) -> dict[str, np.ndarray]:
    # A stream of its own: with default_rng(seed) the projection would reuse the very
    # normals of an inner RFF with the same seed (both default to 0), making P and W
    # dependent, whereas the JL guarantee needs P independent of the inner features.
    rng = np.random.default_rng(np.random.SeedSequence(spec["seed"], spawn_key=(JL_STREAM,)))
    k = spec["n_components"]
    return {"projection": rng.standard_normal((spec["inner_width"], k)) / np.sqrt(k)}


#: The kinds whose parameters are a function of the spec, and the draw of each.
_DRAWS: dict[str, Callable[[MapSpec], dict[str, np.ndarray]]] = {
    "rff": _rff_params,
    "relative_rff": _relative_rff_params,
    "jl": _jl_params,
}


def has_identity(spec: Any) -> bool:
    """Whether ``spec`` (a stored map spec) is of a kind whose fingerprint the spec and arrays determine."""
    return isinstance(spec, dict) and spec.get("kind") in _DRAWS


@functools.lru_cache(maxsize=32)
@single_blas_thread
def cached_params(kind: str, spec_json: str) -> dict[str, np.ndarray]:
    """The random parameters of a spec (canonical JSON, :func:`spec_key`), drawn once per process, read-only."""
    params = _DRAWS[kind](json.loads(spec_json))
    for array in params.values():
        array.setflags(write=False)
    return params


@functools.lru_cache(maxsize=32)
def _spec_and_params_digest(kind: str, spec_json: str) -> Any:
    """sha256 of a spec and of the random parameters it determines, hashed once per process.

    Merging partial sketches compares fingerprints pairwise; for a dense map at d = 768,
    D = 4096 (12 MB of frequencies) each fingerprint cost 7-8 ms, a merge of 8 partials 106 ms.
    """
    digest = hashlib.sha256(spec_json.encode())
    hash_arrays(digest, cached_params(kind, spec_json))
    return digest


def spec_fingerprint(spec: MapSpec, state: dict[str, np.ndarray], params: dict[str, np.ndarray] | None = None) -> str:
    """sha256 of the spec, the random parameters and the state arrays: equal fingerprints, equal maps.

    ``params`` are the parameters of a kind that computes them from fitted state
    (K-JL); the others are drawn from the spec (and hashed once per process).
    """
    spec_json = spec_key(spec)
    if params is None:
        digest = _spec_and_params_digest(spec["kind"], spec_json).copy()
    else:
        digest = hashlib.sha256(spec_json.encode())
        hash_arrays(digest, params)
    hash_arrays(digest, state)
    return digest.hexdigest()


class MapIdentity:
    """A stored map's spec, state arrays and fingerprint, without its estimator.

    What a reader that only describes or merges sketches (``streamrff info``,
    ``streamrff merge``) holds in a sketch's place of its map: the sketch's
    identity (:attr:`spec`, :attr:`fingerprint`, :meth:`state_arrays`) and
    width are those of the map the spec rebuilds, so merging and saving such
    sketches writes the same files, while scikit-learn is never imported.
    Only for kinds with :func:`has_identity`.

    Examples
    --------
    >>> import streamrff as srf
    >>> from streamrff.maps.params import MapIdentity
    >>> rff = srf.RFF(n_features=8, bandwidth=1.0).fit([[0.0, 1.0]])
    >>> identity = MapIdentity(rff.spec, {})
    >>> identity.fingerprint == rff.fingerprint, identity.n_features_out_
    (True, 8)
    """

    def __init__(self, spec: MapSpec, arrays: dict[str, np.ndarray]) -> None:
        self.spec = spec
        self._arrays = dict(arrays)
        self.fingerprint = spec_fingerprint(spec, self._arrays)
        self.n_features_in_ = int(spec["n_features_in"])
        self.n_features_out_ = int(spec["n_components"] if spec["kind"] == "jl" else spec["n_features"])

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The stored state arrays (empty for oblivious maps; a JL map's inner state)."""
        return dict(self._arrays)
