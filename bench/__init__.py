"""The measurement scripts: speed (benchmark.py), scale (scale_bench.py) and retrieval quality
(evaluate.py), run through one entry point, `python -m bench` (see __main__.py).

Layer: measurement, on top of the product: it imports the pipeline and the server's parts,
and nothing of the product imports it.
"""
