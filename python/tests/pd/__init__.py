"""The P/D connector tests (see conftest.py here and pd_util.py)."""
