"""The measurement scripts: speed (benchmark.py), scale (scale_bench.py), retrieval quality
(evaluate.py), code search quality (code_eval.py) and questions across languages
(crosslingual.py), run through one entry point, `python -m bench` (see __main__.py).

Layer: measurement, on top of the product: it imports the pipeline and the server's parts,
and nothing of the product imports it.
"""
