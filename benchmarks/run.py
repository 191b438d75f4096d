"""Run a benchmark experiment file (arms x seeds x pools, each pool dev or test), resumably; print its tables:
``benchmarks/run.py benchmarks/experiments/NAME.toml [--resume] [--rerun-stale] [--table]`` (``--help`` says each)."""

from bench.runner import main  # benchmarks/ is this script's folder, so its package imports as ``bench``

if __name__ == "__main__":
    main()
