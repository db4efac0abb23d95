"""
The configuration and what it reads at load time: settings, a model folder's calibration, the index
manifest, and the one-line error reporting. The lowest wing: every other one may import it; it imports none.
"""
