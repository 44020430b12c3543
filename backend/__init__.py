"""Headless backend of the training console: specs, TF_CONFIG, hosts, launcher, runs, metrics.

Never imports streamlit. Import submodules directly (``from backend.config.spec import load_cluster``);
this package file stays empty so ``import backend`` is cheap.
"""
