"""The lab: benchmarks, the chaos drill and the fleet simulator.

Nothing here is part of the product. Production settings do not install this app; the
settings add it only when ``JOBS_LAB=true`` (set by ``scripts/bench``, ``scripts/chaos``,
``scripts/fleet`` and the test settings), which is what makes its management commands
(``benchmark``, ``bench_*``, ``chaos``, ``fleet``) exist. The engine (``jobs``) never imports
it; it imports the engine and the apps it measures.
"""
