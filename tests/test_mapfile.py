"""Map files (``save_map`` / ``load_map``) and the pooled map fit (``fit_map`` over several sources).

References: the map's own random parameters regenerated independently by
``map_from_spec`` are not used; instead features are compared with the original
fitted object bit for bit, bytes on disk with numpy's, and the pooled median with
the median pairwise distance of the pooled seeded sample computed in numpy.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import streamrff as srf
from streamrff._base.sampling import MEDIAN_SAMPLE_ROWS, row_keys

RNG = np.random.default_rng(11)
X = RNG.normal(size=(3_000, 4)).astype(np.float32)


def test_save_map_load_map_round_trip_rff_bit_for_bit(tmp_path):
    rff = srf.RFF(n_features=128, bandwidth="median", variant="cosphase", orthogonal=True, seed=5).fit(X)
    path = tmp_path / "map.json"

    srf.save_map(rff, path)
    loaded = srf.load_map(path)
    document = json.loads(path.read_text())

    assert document["format"] == "streamrff.map" and document["version"] == 1
    assert document["spec"]["bandwidth"] == rff.bandwidth_  # exact float round trip
    assert loaded.fingerprint == rff.fingerprint == document["fingerprint"]
    np.testing.assert_array_equal(loaded.transform(X[:50]), rff.transform(X[:50]))
    assert not list(tmp_path.glob(".*partial*"))


def test_save_map_kjl_landmarks_are_stored_losslessly(tmp_path):
    kjl = srf.KJL(n_landmarks=60, n_components=10, seed=2).fit(X)
    path = tmp_path / "kjl.json"

    srf.save_map(kjl, path)
    entry = json.loads(path.read_text())["arrays"]["landmarks"]
    stored = np.frombuffer(base64.b64decode(entry["data"]), dtype=entry["dtype"]).reshape(entry["shape"])

    assert entry["dtype"] == "<f8" and entry["shape"] == [60, 4]
    np.testing.assert_array_equal(stored, kjl.landmarks_)
    loaded = srf.load_map(path)
    assert loaded.fingerprint == kjl.fingerprint
    np.testing.assert_array_equal(loaded.transform(X[:20]), kjl.transform(X[:20]))


@pytest.mark.parametrize("name", ["s.zarr", "s.zip"])
def test_load_map_of_a_sketch_file_returns_its_map(tmp_path, name):
    kjl = srf.KJL(n_landmarks=30, n_components=5).fit(X)
    sketch = srf.sketch_array(X[:100], kjl)
    sketch.save(tmp_path / name)

    assert srf.load_map(tmp_path / name).fingerprint == sketch.fingerprint


def test_save_map_refuses_existing_target_unless_overwrite(tmp_path):
    path = tmp_path / "map.json"
    first = srf.RFF(n_features=16, bandwidth=1.0).fit(X)
    second = srf.RFF(n_features=16, bandwidth=2.0).fit(X)
    srf.save_map(first, path)
    before = path.read_bytes()

    with pytest.raises(FileExistsError, match="overwrite=True"):
        srf.save_map(second, path)
    assert path.read_bytes() == before
    srf.save_map(second, path, overwrite=True)
    assert srf.load_map(path).fingerprint == second.fingerprint


def test_save_map_refuses_unfitted_maps_and_other_objects(tmp_path):
    with pytest.raises(srf.InputError, match="fitted before it is saved"):
        srf.save_map(srf.RFF(bandwidth=1.0), tmp_path / "m.json")
    with pytest.raises(srf.InputError, match="Got dict"):
        srf.save_map({"kind": "rff"}, tmp_path / "m.json")
    assert not list(tmp_path.iterdir())


def _edit(path, change):
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d.update(version=2),
            "map format version 2; this streamrff reads up to version 1. Upgrade streamrff",
        ),
        (lambda d: d.update(format="other"), "not a streamrff map file: expected format='streamrff.map'"),
        (lambda d: d["spec"].update(bandwidth=d["spec"]["bandwidth"] * 1.001), "fingerprint does not match"),
        (lambda d: d["spec"].update(kind="nope"), "Unknown feature map kind 'nope'"),
        (lambda d: d["spec"].update(n_features=2**40), "random parameters to rebuild"),
        (lambda d: d.update(fingerprint=1), "needs a 'spec' object, a 'fingerprint' string"),
        (lambda d: d["arrays"]["landmarks"].update(shape=[61, 4]), "holds 1920 bytes"),
        (lambda d: d["arrays"]["landmarks"].update(data="@@@"), "not valid base64"),
        (lambda d: d["arrays"]["landmarks"].update(dtype="|O"), "has dtype '|O'"),
    ],
)
def test_load_map_refuses_bad_files_with_our_error(tmp_path, change, message):
    path = tmp_path / "map.json"
    srf.save_map(srf.KJL(n_landmarks=60, n_components=10).fit(X), path)
    _edit(path, change)

    with pytest.raises(srf.MapFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        srf.load_map(path)


def test_load_map_refuses_non_json_and_missing_files(tmp_path):
    (tmp_path / "data.csv").write_text("1,2\n3,4\n")
    with pytest.raises(srf.MapFormatError, match="not JSON"):
        srf.load_map(tmp_path / "data.csv")
    with pytest.raises(srf.MapFormatError, match="does not exist"):
        srf.load_map(tmp_path / "nothing.json")
    with pytest.raises(srf.MapFormatError, match="neither a map file nor a readable sketch"):
        srf.load_map(tmp_path)  # a directory that is no sketch


def test_fit_map_pooled_median_equals_numpy_median_of_the_pooled_seeded_sample(tmp_zarr):
    a = RNG.normal(size=(2_500, 3)).astype(np.float32)
    b = (RNG.normal(size=(1_700, 3)) * 1.6 + 0.5).astype(np.float32)
    sources = [tmp_zarr(a, 400, name="a.zarr"), tmp_zarr(b, 300, name="b.zarr")]

    pooled = srf.fit_map(srf.RFF(n_features=64, bandwidth="median", seed=3), sources)

    # Independent reference: the MEDIAN_SAMPLE_ROWS rows of [a; b] with the smallest keys of their
    # global row index, and the median of their pairwise distances by numpy broadcasting.
    rows = np.vstack([a, b]).astype(np.float64)
    sample = rows[np.argsort(row_keys(3, 0, rows.shape[0]), kind="stable")[:MEDIAN_SAMPLE_ROWS]]
    distances = np.sqrt(((sample[:, None, :] - sample[None, :, :]) ** 2).sum(-1))[np.triu_indices(len(sample), 1)]
    assert pooled.bandwidth_ == pytest.approx(float(np.median(distances)), rel=1e-12)
    assert 0 < (np.argsort(row_keys(3, 0, rows.shape[0]))[:MEDIAN_SAMPLE_ROWS] >= a.shape[0]).mean() < 1  # both sites
    alone = [srf.fit_map(srf.RFF(n_features=64, bandwidth="median", seed=3), [s]).bandwidth_ for s in sources]
    assert all(abs(value - pooled.bandwidth_) > 1e-3 for value in alone)


def test_fit_map_refuses_sources_of_different_widths():
    with pytest.raises(srf.InputError, match="same number of columns"):
        srf.fit_map(srf.RFF(n_features=8, bandwidth=1.0), [X, X[:, :2]])
    with pytest.raises(srf.InputError, match="non-empty list of sources"):
        srf.fit_map(srf.RFF(n_features=8, bandwidth=1.0), "a.zarr")


def test_merge_of_two_maps_names_the_differing_parameters():
    a = srf.sketch_array(X[:100], srf.RFF(n_features=16, bandwidth=3.841).fit(X))
    b = srf.sketch_array(X[100:200], srf.RFF(n_features=16, bandwidth=3.887).fit(X))

    with pytest.raises(srf.SketchMismatchError, match=r"bandwidth 3.841 vs 3.887 .*feature_map=first.feature_map"):
        srf.merge(a, b)


def test_two_sample_test_with_a_shared_map_uses_its_features():
    Y = (RNG.normal(size=(400, 4)) + 0.5).astype(np.float32)
    shared = srf.RFF(n_features=64, bandwidth=1.7, seed=4).fit(X)

    result = srf.two_sample_test(X[:500], Y, feature_map=shared, n_permutations=19)

    Zx, Zy = (shared.transform(rows).astype(np.float64) for rows in (X[:500], Y))
    n, m = len(Zx), len(Zy)
    kxx, kyy = Zx @ Zx.T, Zy @ Zy.T
    expected = (
        (kxx.sum() - np.trace(kxx)) / (n * (n - 1))
        + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
        - 2 * (Zx @ Zy.T).mean()
    )
    assert result.statistic == pytest.approx(expected, rel=1e-6)
    assert result.map_spec == shared.spec
    with pytest.raises(srf.InputError, match="an unfitted RFF"):
        srf.two_sample_test(X[:50], Y[:50], feature_map=srf.RFF(bandwidth=1.0))


def test_kernel_kmeans_with_a_shared_map_clusters_in_it_and_refuses_overridden_parameters():
    from sklearn.datasets import make_blobs

    rows, _ = make_blobs(600, centers=[[0, 0], [5, 5]], cluster_std=0.5, random_state=1)
    shared = srf.KJL(n_landmarks=100, n_components=20, bandwidth=2.0).fit(rows)

    model = srf.KernelKMeans(n_clusters=2, feature_map=shared).fit(rows)

    assert model.feature_map_ is shared and model.stop_reason_ in ("converged", "max_iter")
    assert model.stop_reason_ == ("converged" if model.history_[-1].center_shift <= model.tol else "max_iter")
    # The labels are the nearest centres of the shared map's own features (numpy reference).
    features = shared.transform(rows).astype(np.float64)
    distances = ((features[:, None, :] - model.cluster_centers_[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(model.labels_, distances.argmin(1))
    with pytest.raises(srf.InputError, match="n_features=64 would be ignored"):
        srf.KernelKMeans(n_clusters=2, feature_map=shared, n_features=64).fit(rows)
    with pytest.raises(srf.InputError, match="an unfitted RFF"):
        srf.KernelKMeans(n_clusters=2, feature_map=srf.RFF(bandwidth=1.0)).fit(rows)
