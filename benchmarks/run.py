"""Run a benchmark experiment file (arms x seeds x pools, each pool dev or test), resumably; print its tables.

.venv/bin/python benchmarks/run.py benchmarks/experiments/store.toml            # a fresh run
.venv/bin/python benchmarks/run.py benchmarks/experiments/store.toml --resume   # continue a killed one
.venv/bin/python benchmarks/run.py benchmarks/experiments/store.toml --table    # the tables of its summary
"""

from bench.runner import main  # benchmarks/ is this script's folder, so its package imports as ``bench``

if __name__ == "__main__":
    main()
