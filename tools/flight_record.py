#!/usr/bin/env python3
"""Merges the flight records of a job's ranks and says which rank hangs.

    python3 tools/flight_record.py .                     # every flight_rank*.json here
    python3 tools/flight_record.py run/flight_rank*.json --ops 5

Each loom process keeps a ring of its last operations on every process group
(parallel/comm/flight_recorder.h) and writes it as flight_rank<r>.json when a
group fails (a timeout) or on SIGUSR2. This tool reads them all and prints,
for each group, the collective its ranks wait in and which ranks never
entered it, for example:

    group world (mpi, 4 ranks): ranks 0, 1, 3 wait in all_reduce #17 (sum, 1024 x float32);
    rank 2 never entered it: its last is all_reduce #16, completed

A collective's number is the same on every rank of its group, so a rank
whose last collective has a lower number than the one the others wait in
never called it: it is stuck elsewhere (in computation, a deadlock, a
different group), or its process died. Sends and receives still waiting are
listed below their group's line, with what the peer recorded for that tag.
A rank that wrote no record (dead, stopped, or not signalled) is named too.

--ops N adds each rank's last N operations of each group, with their state
and times (seconds before that rank's record was written).

Python 3 standard library only. Exit status: 0 when the records were read
(whatever they show), 1 when they cannot be (missing, not a flight record,
records of different jobs, a rank recorded twice), 2 for a bad command line.
"""
import argparse
import glob
import json
import os
import sys

FORMAT = "loom flight record 1"


class Failure(Exception):
    pass


def rank_list(ranks):
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def elements(entry, numel):
    return f"{numel} x {entry['dtype']}"


def describe(entry):
    """As loom's own messages name an operation (Op::describe, parallel/comm/op.cc)."""
    op, name = entry["op"], f"{entry['op']} #{entry['seq']}"
    if op == "all_reduce":
        return f"{name} ({entry.get('reduce', '?')}, {elements(entry, entry['input_numel'])})"
    if op == "broadcast":
        return f"{name} (root {entry.get('root', '?')}, {elements(entry, entry['input_numel'])})"
    if op == "all_gather":
        return f"{name} ({elements(entry, entry['input_numel'])} in, {elements(entry, entry['output_numel'])} out)"
    if op == "reduce_scatter":
        return (f"{name} ({entry.get('reduce', '?')}, {elements(entry, entry['input_numel'])} in, "
                f"{elements(entry, entry['output_numel'])} out)")
    if op == "send":
        return f"{name} to rank {entry.get('peer')} (tag {entry.get('tag')}, {elements(entry, entry['input_numel'])})"
    if op == "recv":
        return f"{name} from rank {entry.get('peer')} (tag {entry.get('tag')}, {elements(entry, entry['input_numel'])})"
    return name


def short(entry):
    return f"{entry['op']} #{entry['seq']}, {entry['state']}"


def files_of(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(path, "flight_rank*.json")))
            if not found:
                raise Failure(f"no flight_rank*.json in {path}")
            files += found
        else:
            files.append(path)
    return files


def read_record(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise Failure(f"cannot read {path}: {e.strerror}")
    try:
        record = json.loads(text)
    except ValueError:
        raise Failure(f"{path} is not a flight record: not JSON")
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise Failure(f"{path} is not a flight record: expected \"format\": \"{FORMAT}\"")
    for key, kind in (("groups", list), ("entries", list), ("rank", int)):
        if not isinstance(record.get(key), kind):
            raise Failure(f"{path} is not a flight record: '{key}' is missing or not a {kind.__name__}")
    return record


class Member:
    """One rank of one group, as its process recorded it."""

    def __init__(self, group, record, path):
        self.rank = group["rank"]
        self.failure = group.get("failure", "")
        self.record = record
        self.path = path
        self.entries = []

    def collectives(self):
        return sorted((e for e in self.entries if not e["p2p"]), key=lambda e: e["seq"])

    def p2p(self):
        return sorted((e for e in self.entries if e["p2p"]), key=lambda e: e["seq"])

    def stopped_at(self, entries):
        """The first operation after the last completed one, unless it failed
        while the group stayed usable (the ranks disagreed and went on)."""
        done = max((i for i, e in enumerate(entries) if e["state"] == "completed"), default=-1)
        for e in entries[done + 1:]:
            if e["state"] != "failed" or self.failure:
                return e
        return None

    def ago(self, entry, key):
        if entry.get(key) is None:
            return "-"
        return f"{(self.record['written_us'] - entry[key]) / 1e6:.3f}"


def load(paths):
    records = [(path, read_record(path)) for path in files_of(paths)]
    jobs = {r["job"] for _, r in records if r.get("job")}
    if len(jobs) > 1:
        raise Failure("records of different jobs: " + "; ".join(
            f"{os.path.basename(p)} is job {r.get('job') or '?'}" for p, r in records) +
            " (remove the stale ones)")
    groups = {}  # name -> {"backend", "size", "members": {rank: Member}}
    for path, record in records:
        members = []
        for g in record["groups"]:
            info = groups.setdefault(g["name"], {"backend": g["backend"], "size": g["size"], "members": {}})
            if g["size"] != info["size"]:
                raise Failure(f"group {g['name']} has {info['size']} ranks in one record and {g['size']} in {path}")
            if g["rank"] in info["members"]:
                other = info["members"][g["rank"]].path
                raise Failure(f"rank {g['rank']} of group {g['name']} is in two records: {other} and {path} "
                              "(remove the stale one)")
            member = Member(g, record, path)
            info["members"][g["rank"]] = member
            members.append(member)
        for e in record["entries"]:
            if not 0 <= e.get("group", -1) < len(members):
                raise Failure(f"{path} is not a flight record: entry {e.get('id')} names no group")
            members[e["group"]].entries.append(e)
    return records, groups


def collective_line(name, info):
    n, members = info["size"], info["members"]
    head = f"group {name} ({info['backend']}, {n} {'rank' if n == 1 else 'ranks'}): "
    absent = [r for r in range(n) if r not in members]
    stopped = {r: m.stopped_at(m.collectives()) for r, m in members.items()}
    pending = {r: e for r, e in stopped.items() if e is not None}
    parts = []
    if not pending:
        lasts = {}
        for r, m in members.items():
            c = m.collectives()
            lasts.setdefault(describe(c[-1]) if c else None, []).append(r)
        parts.append("no collective pending" + "".join(
            f"; {rank_list(rs)}: last {d}" if d else f"; {rank_list(rs)}: none left in the record"
            for d, rs in sorted(lasts.items(), key=lambda item: min(item[1]))))
    else:
        target = min(e["seq"] for e in pending.values())
        waiting, queued, never, passed = {}, [], {}, {}
        for r, m in sorted(members.items()):
            e = pending.get(r)
            if e is not None and e["seq"] == target:
                waiting.setdefault(describe(e), []).append(r)
                if e["state"] == "queued":
                    queued.append(r)
                continue
            c = m.collectives()
            if not c or c[-1]["seq"] < target:
                never.setdefault(short(c[-1]) if c else None, []).append(r)
            else:
                passed.setdefault(f"waits in {describe(e)}, {e['state']}" if e else "is idle", []).append(r)
        parts += [f"{rank_list(rs)} wait{'s' if len(rs) == 1 else ''} in {d}" for d, rs in waiting.items()]
        if queued:
            parts.append(f"{rank_list(queued)} issued it, but {'its' if len(queued) == 1 else 'their'} "
                         "communication thread has not started it (queued behind another operation)")
        for last, rs in never.items():
            whose = "its" if len(rs) == 1 else "their"
            parts.append(f"{rank_list(rs)} never entered it: " +
                         (f"{whose} last is {last}" if last else "no collective of this group recorded"))
        for what, rs in passed.items():
            parts.append(f"{rank_list(rs)} completed it and {what}")
    if absent:
        parts.append(f"{rank_list(absent)} wrote no record (dead, stopped, or not signalled)")
    return head + "; ".join(parts)


def p2p_lines(info):
    lines = []
    members = info["members"]
    for r, m in sorted(members.items()):
        # Sends and receives finish out of order (a send once its message has
        # gone): each unfinished one waits, and after a failure so do the ones
        # it failed.
        for e in m.p2p():
            if e["state"] == "completed" or (e["state"] == "failed" and not m.failure):
                continue
            line = f"  rank {r} waits in {describe(e)}, {e['state']}"
            peer = members.get(e.get("peer"))
            if peer is None:
                line += f"; rank {e.get('peer')} wrote no record"
            else:
                mirror = "send" if e["op"] == "recv" else "recv"
                match = [p for p in peer.p2p() if p["op"] == mirror and p.get("peer") == r and p.get("tag") == e.get("tag")]
                line += (f"; rank {e['peer']} recorded {len(match)} {mirror}{'s' if len(match) != 1 else ''} "
                         f"{'to' if mirror == 'send' else 'from'} it with tag {e.get('tag')}" +
                         (f" (last: {short(match[-1])})" if match else ""))
            lines.append(line)
    return lines


def failure_lines(info):
    return [f"  rank {r} found it failed: {m.failure}" for r, m in sorted(info["members"].items()) if m.failure]


def ops_lines(info, count):
    lines = []
    for r, m in sorted(info["members"].items()):
        last = sorted(m.entries, key=lambda e: e["id"])[-count:]
        lines.append(f"  rank {r}'s last {len(last)} (seconds before its record was written: issued / started / finished):")
        for e in last:
            lines.append(f"    {describe(e)}: {e['state']}, {m.ago(e, 'issued_us')} / {m.ago(e, 'started_us')} / "
                         f"{m.ago(e, 'finished_us')}")
    return lines


def main():
    parser = argparse.ArgumentParser(description="Which rank hangs: merges loom's flight records.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a folder of flight_rank*.json, or record files")
    parser.add_argument("--ops", type=int, default=0, metavar="N", help="also list each rank's last N operations")
    args = parser.parse_args()
    if args.ops < 0:
        parser.error(f"--ops must be 0 or more, got {args.ops}")
    try:
        records, groups = load(args.paths)
    except Failure as e:
        print(f"flight_record: {e}", file=sys.stderr)
        return 1
    ranks = sorted(r["rank"] for _, r in records)
    job = next((r["job"] for _, r in records if r.get("job")), "")
    reasons = {}
    for _, r in records:
        reasons.setdefault(r.get("reason", "?"), []).append(r["rank"])
    print(f"{len(records)} flight record{'s' if len(records) != 1 else ''} ({rank_list(ranks)})" +
          (f" of job {job}" if job else "") + ", written on " +
          "; ".join(f"{reason} ({rank_list(rs)})" for reason, rs in sorted(reasons.items(), key=lambda i: min(i[1]))))
    for _, r in records:
        if r.get("recorded", 0) > r.get("capacity", 0) > 0:
            print(f"rank {r['rank']} kept its last {r['capacity']} of {r['recorded']} operations "
                  "(LOOM_FLIGHT_RECORDER_ENTRIES)")
    for name in sorted(groups, key=lambda g: (g != "world", g)):
        info = groups[name]
        print(collective_line(name, info))
        for line in p2p_lines(info) + failure_lines(info) + (ops_lines(info, args.ops) if args.ops else []):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
