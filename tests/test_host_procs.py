"""The process census the hostile-exec test trusts: an escaped process counts, a bystander's does not."""

from __future__ import annotations

import subprocess

from canaries import kill_marked, wait_until
from host_procs import host_pids, process_table, strays_since


def test_orphans_born_after_the_census_count_and_a_bystander_s_children_do_not():
    bystander_marker, orphan_marker = "6071.5", "6072.5"
    # a program already running before the census (a pip install beside the suite, say) that starts
    # processes afterwards
    bystander = subprocess.Popen(
        ["bash", "-c", f"read go; for i in 1 2 3 4 5; do sleep {bystander_marker} & done; wait"],
        stdin=subprocess.PIPE,
    )
    try:
        before = process_table()
        assert bystander.stdin is not None
        bystander.stdin.write(b"go\n")
        bystander.stdin.close()
        assert wait_until(lambda: len(host_pids(bystander_marker)) == 5, 10)
        assert not set(host_pids(bystander_marker)) & set(strays_since(before))
        # what an escaped fork bomb looks like: its shell exits, its children are reparented
        subprocess.run(
            ["bash", "-c", f"for i in 1 2 3; do setsid sleep {orphan_marker} & done"], check=True
        )
        assert wait_until(lambda: len(host_pids(orphan_marker)) == 3, 10)
        strays = set(strays_since(before))  # other workers' orphans may count too: a subset test
        assert set(host_pids(orphan_marker)) <= strays
        assert not set(host_pids(bystander_marker)) & strays
    finally:
        kill_marked(bystander_marker)
        kill_marked(orphan_marker)
        bystander.kill()
        bystander.wait()
