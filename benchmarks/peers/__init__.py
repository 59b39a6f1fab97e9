"""Peer model servers (KServe, LitServe, MLServer) serving issue 16's W1 and W2, each
in its own venv (benchmarks/peers/make_venvs.sh); benchmarks/table.py's `--peers`."""
