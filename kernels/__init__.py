"""Pure array functions compiled with Numba: numpy and numba imports only.

Kernels take arrays and scalars and return arrays (or write into ``out``); the
engine validates shapes, dtypes and ranges once at the boundary before calling.
"""
