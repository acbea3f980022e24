"""What every scenario shares: processes (L{procs}), CPU accounting (L{cpu}), load generators
(L{load}), the contenders and their sites (L{site}), the paired comparison (L{pairs}), results (L{results})."""
