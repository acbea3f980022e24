"""
twingress's benchmarks, one tool: ``python -m bench SCENARIO [options]`` runs a scenario (a module of
L{bench.scenarios}) over the small library of L{bench.lib} (processes and pinning, load generators,
CPU accounting from /proc, the interleaved paired slices) and writes its figures as a JSON file
under bench/results/; ``python -m bench report FILE...`` prints them as tables.  See bench/README.md.
"""
