"""The benchmarks' own package: ``experiment`` reads an experiment file into cells, ``runner`` runs, resumes and
summarises them (``benchmarks/run.py``), ``environment`` records where, ``stats`` and ``tables`` report a summary,
``tasks`` holds what a cell measures."""
