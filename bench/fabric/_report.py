"""The human tables printed after a run, one block per section that ran."""

from __future__ import annotations

from typing import Any

from bench._common import (
    median,
)


def print_tables(result: dict[str, Any]) -> None:
    rep = result.get("replication")
    if rep:
        print(f"\nReplication ({rep['nodes']} daemons; events/s from the phase start)")
        print(
            f"{'phase':<10}{'via':>4}{'events':>8}{'client cmd/s':>14}{'cmd p50 ms':>12}"
            f"{'master ev/s':>13}{'vs lone':>9}{'followers ev/s':>22}{'lag p50/p99 ms':>18}"
            f"{'backlog p50/p99 ev':>20}"
        )
        for p in rep["phases"]:
            followers = "/".join(f"{x:.0f}" for x in p["follower_events_per_s"]) or "-"
            lag = f"{p['lag_ms_p50']}/{p['lag_ms_p99']}" if p["lag_samples"] else "-"
            backlog = (
                f"{p['backlog_events_p50']:.0f}/{p['backlog_events_p99']:.0f}"
                if p["backlog_events_p50"] is not None
                else "-"
            )
            print(
                f"{p['label']:<10}{p['via']:>4}{p['events']:>8}{p['client_cmd_per_s']:>14.1f}"
                f"{p['command_ms_p50']:>12.1f}{p['master_events_per_s']:>13.1f}"
                f"{p['vs_lone']:>8.3f}x{followers:>22}{lag:>18}{backlog:>20}"
            )
        print(
            f"{'phase':<10}{'CPU ms/event: master':>22}{'followers':>18}{'client':>8}"
            f"{'busy cores':>12}{'follower control frames/event':>31}"
        )
        for p in rep["phases"]:
            followers = "/".join(f"{x:.2f}" for x in p["follower_cpu_ms_per_event"]) or "-"
            frames = "/".join(f"{x:.2f}" for x in p["follower_control_frames_per_event"]) or "-"
            print(
                f"{p['label']:<10}{p['master_cpu_ms_per_event']:>22.2f}{followers:>18}"
                f"{p['client_cpu_ms_per_event']:>8.2f}{p['cpu_busy_cores']:>12.2f}{frames:>31}"
            )
        http = rep["http_get"]
        print(
            f"one API GET (p50): httpx {http['httpx_keepalive_ms_p50']} ms kept alive, "
            f"{http['httpx_fresh_ms_p50']} ms on a fresh connection; this client (kept alive, "
            f"TCP_QUICKACK) {http['quick_ms_p50']} ms"
        )
        print(
            f"joiners that made themselves master for a moment at start-up: "
            f"{rep['joiners_self_elected_at_start']}/{rep['nodes'] - 1}"
        )
        rounds = [p["round_ms"] for p in rep["phases"] if p["round_ms"] is not None]
        print(f"lag resolution: one sampling round (median {median(rounds):.1f} ms)")
        pr = rep["probes"]
        print(
            f"lone events ({pr['probes']}): master answers in {pr['master_answer_ms_p50']}"
            f"/{pr['master_answer_ms_p99']} ms (p50/p99); every follower has the event "
            f"{pr['followers_after_answer_ms_p50']}/{pr['followers_after_answer_ms_p99']} ms "
            "after that answer"
        )
    dp = result.get("dataplane")
    if dp:
        print("\nData plane round trip, loopback, in-process (microseconds, p50/p99)")
        print(
            f"{'payload':>9}{'pings':>7}{'Skulk':>16}{'no envelope':>16}{'zmq+CURVE':>16}"
            f"{'raw zmq':>16}{'Skulk/raw p50':>15}{'p99':>7}"
        )
        for row in dp["sizes"]:
            cells = "".join(
                f"{row[f'{side}_rtt_us_p50']:>8.0f}/{row[f'{side}_rtt_us_p99']:<7.0f}"
                for side in ("skulk", "transport", "curve", "raw")
            )
            print(
                f"{row['payload_bytes']:>9}{row['pings']:>7} {cells}"
                f"{row['ratio_p50']:>13.2f}x{row['ratio_p99']:>6.2f}x"
            )
    fo = result.get("failover")
    if fo:
        print("\nFailover (3 daemons, SIGKILL the master; seconds from the kill)")
        print(
            f"{'rep':>4}{'new master':>12}{'chat 200':>10}{'State command 200':>19}"
            f"{'dead node removed':>19}{'restarted node self-elected':>29}"
        )
        for i, run in enumerate(fo["runs"], 1):
            removed = f"{run['removed_s']:.2f}" if "removed_s" in run else "-"
            print(
                f"{i:>4}{run['new_master_s']:>12.2f}{run['chat_ok_s']:>10.2f}"
                f"{run['command_ok_s']:>19.2f}{removed:>19}{run['restarted_self_elected']!s:>29}"
            )
        low, high = fo["election_window_s"]
        print(
            f"median: new master {fo['new_master_s_median']} s, chat {fo['chat_ok_s_median']} s "
            f"(max {fo['chat_ok_s_max']} s; target < {fo['target_s']:g} s: "
            f"{'ok' if fo['ok'] else 'MISS'}), State command {fo['command_ok_s_median']} s"
        )
        print(
            f"election window by design: {low:g}-{high:g} s; one chat before the kill took "
            f"{fo['baseline_chat_ms_median']} ms (median)"
        )
    jn = result.get("join")
    if jn:
        print("\nJoin (seconds from spawning the new node)")
        print(
            f"{'rep':>4}{'nodes':>6}{'history':>9}{'in others topology':>20}{'API up':>8}"
            f"{'in every topology':>19}{'converged':>11}{'lone API up':>13}"
            f"{'self-elected':>14}{'removed as unseen':>19}"
        )
        for i, run in enumerate(jn["runs"], 1):
            print(
                f"{i:>4}{run['cluster_size']:>6}{run['history_events']:>9}"
                f"{run['in_cluster_topology_s']:>20.2f}{run['api_s']:>8.2f}"
                f"{run['in_every_topology_s']:>19.2f}{run['converged_s']:>11.2f}"
                f"{run['lone_api_s']:>13.2f}{run['self_elected']!s:>14}"
                f"{run['removed_as_unseen']!s:>19}"
            )
