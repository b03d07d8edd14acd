"""gpu-check's modules (scripts/bench/gpu_check.py is the entry point; standard library only).

report.py     Section, the report folder (gpu-report.md, gpu-report.json, logs.tar.gz), rewritten
              atomically after every command
runner.py     where the trainer and the tests are, commands with streamed logs and deadline-bound
              timeouts, the one torch process (torch_side.py) and its requests
estimates.py  the H100 and CPU cost constants each section's estimate is computed from
sections_*.py the sections, in the order of value (gpu_check.py lists them)
"""
