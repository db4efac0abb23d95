"""
The configuration and what it reads at load time (settings, a model folder's calibration, the index
manifest), how a process logs, and the one-line error report. The lowest wing: every other one may
import it; it imports none.
"""
