"""``store search``, ``store migrate`` and ``store import`` derive their settings' options from the library's
settings dataclasses and read them from ``--config FILE`` too; an option given on the command line wins."""

from __future__ import annotations

import json

import pytest

from subspaces.store import Store
from test_store import cli, sentences


@pytest.fixture
def folder(tmp_path, tiny_model_dir):
    Store.create(tmp_path / "s", str(tiny_model_dir)).add(sentences(40), ids=range(40), write_batch=40)
    return tmp_path / "s"


def test_store_search_reads_its_settings_from_a_config_file_and_the_command_line_wins(folder, tmp_path, monkeypatch):
    seen = []

    def captured(self, texts, k, **options):
        seen.append({"k": k} | options)
        return []

    monkeypatch.setattr(Store, "search", captured)
    config = tmp_path / "search.toml"
    config.write_text('k = 3\ndims = 8\nrerank = "none"\nbatch_size = 2\nquery_prompt = "q: "\n')
    assert cli("store", "search", folder, "a query", "--config", config).exit_code == 0
    result = cli("store", "search", folder, "a query", "--config", config, "-k", "5", "--rerank", "full")
    assert result.exit_code == 0, result.output
    chosen = [(s["k"], s["dims"], s["rerank"], s["batch_size"], s["query_prompt"]) for s in seen]
    assert chosen == [(3, 8, "none", 2, "q: "), (5, 8, "full", 2, "q: ")]
    config.write_text("refine_factor = 2\n")  # the command's checks read the file's settings too
    result = cli("store", "search", folder, "a query", "--config", config)
    assert result.exit_code == 2 and "--refine-factor re-ranks the ANN index's candidates" in result.output


def test_store_migrate_reads_its_settings_from_a_config_file_and_the_command_line_wins(folder, tmp_path, monkeypatch):
    seen = []

    def captured(self, model, **options):
        seen.append(options)
        return {}

    monkeypatch.setattr(Store, "migrate", captured)
    config = tmp_path / "migrate.json"
    config.write_text(json.dumps({"pairs": 100, "maps": "orthogonal,affine", "heldout": 40, "seed": 3}))
    assert cli("store", "migrate", folder, "--to", "other", "--config", config).exit_code == 0
    result = cli("store", "migrate", folder, "--to", "other", "--config", config, "--seed", "5", "--maps", "affine")
    assert result.exit_code == 0, result.output
    chosen = [(s["pairs"], s["maps"], s["heldout"], s["seed"], s["holdout"], s["anchors"]) for s in seen]
    assert chosen == [(100, ["orthogonal", "affine"], 40, 3, 0.2, "paired"), (100, ["affine"], 40, 5, 0.2, "paired")]


def test_store_import_reads_its_settings_from_a_config_file_and_the_command_line_wins(tmp_path, monkeypatch):
    import numpy as np

    import subspaces.cli.store as commands

    seen = []

    def captured(store, vectors, **options):
        seen.append(options)
        raise KeyboardInterrupt  # stop before any work (exit 130)

    monkeypatch.setattr(commands, "import_vectors", captured)
    np.save(tmp_path / "v.npy", np.eye(4, dtype=np.float32))
    config = tmp_path / "import.toml"
    config.write_text("batch_rows = 2\ncheck_rows = 8\nmin_cosine = 0.9\n")
    args = ["store", "import", tmp_path / "s", "--vectors", tmp_path / "v.npy", "--foreign", "m", "--config", config]
    assert cli(*args).exit_code == 130
    assert cli(*args, "--batch-rows", "3").exit_code == 130
    assert [(s["batch_rows"], s["check_rows"], s["min_cosine"]) for s in seen] == [(2, 8, 0.9), (3, 8, 0.9)]
    config.write_text("batch_rows = 0\n")
    result = cli(*args)
    assert result.exit_code == 2 and "batch_rows must be at least 1, got 0" in result.output
