"""The benchmarks' own small package: an experiment file's cells run, resumed and summarised by one runner.

``environment`` records where a run happened; ``experiment`` reads an experiment file into cells; ``runner``
runs them (``benchmarks/run.py``); ``stats`` holds the paired bootstrap and seed intervals; ``tables`` prints
Markdown from a summary JSON; ``tasks`` holds what a cell measures.
"""
