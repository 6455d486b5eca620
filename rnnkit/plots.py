"""Plots shared by recipes and notebooks (matplotlib, Agg backend, PNG files).

Every function writes its figure atomically (temporary file, then rename) and closes it.
"""
