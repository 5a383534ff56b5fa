#!/usr/bin/env python3
"""loadgen.py - a load generator for `cosmos3 serve` over real HTTP (Python's
standard library only).

It sends a mixed stream of jobs - pictures (POST /v1/images/generations) and
short clips (POST /v1/videos, polled until completed, then downloaded) of
several sizes - from C concurrent clients (a closed loop: each client sends its
next job when its last one is answered), for each C of --concurrency, and
reports per level: throughput (jobs per minute), client latency p50/p99 (the
whole job: request to picture, or create to downloaded clip), the queue wait
and the mean seconds per stage the server reports (an image answer's
`metrics`; a video job's own timings where the server gives them).

    bench/loadgen.py --url http://127.0.0.1:8000 [--concurrency 1,2,4,8,16]
                     [--jobs 48] [--mix image:64x64:3,image:96x96:1,video:64x64x9:1]
                     [--steps N] [--seed 1] [--label NAME] [--json out.json]
    bench/loadgen.py --compare today.json new.json ...   # side by side, ratios to the first

The job sequence is drawn from --seed, so every server measured gets the same
requests in the same order. A 429/503 answer (busy) is retried after its
Retry-After and counted as `busy`; any other failure counts as an error.
bench/load.sh runs it against several `serve` settings (bench/README.md).
"""

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

STAGES = ("tokenize", "und", "denoise", "vae", "encode")  # "encode": the picture's or clip's write
PROMPTS = (
    "a red circle on a blue background, on the right",
    "a green square on a yellow background, on the left",
    "a blue triangle on a white background, in the middle",
    "a yellow circle on a black background, at the top",
)
CLIP_PROMPTS = (
    "a red circle on a blue background, moving up",
    "a green square on a yellow background, moving to the right",
)


def parse_mix(text):
    """image:WxH[:WEIGHT] and video:WxHxFRAMES[:WEIGHT], comma separated."""
    mix = []
    for part in text.split(","):
        f = part.strip().split(":")
        if len(f) not in (2, 3) or f[0] not in ("image", "video"):
            raise SystemExit(f"loadgen: --mix entry '{part}': use image:WxH[:WEIGHT] or video:WxHxFRAMES[:WEIGHT]")
        dims = f[1].lower().split("x")
        want = 2 if f[0] == "image" else 3
        if len(dims) != want or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise SystemExit(f"loadgen: --mix entry '{part}': the size is WxH (image) or WxHxFRAMES (video)")
        weight = float(f[2]) if len(f) == 3 else 1.0
        mix.append({"kind": f[0], "w": int(dims[0]), "h": int(dims[1]),
                    "frames": int(dims[2]) if f[0] == "video" else 1, "weight": weight})
    return mix


def make_jobs(mix, n, seed):
    rng = random.Random(seed)
    weights = [m["weight"] for m in mix]
    jobs = []
    for i in range(n):
        m = rng.choices(mix, weights)[0]
        prompts = PROMPTS if m["kind"] == "image" else CLIP_PROMPTS
        jobs.append(dict(m, prompt=prompts[rng.randrange(len(prompts))], seed=rng.randrange(1, 1 << 31), index=i))
    return jobs


class Client:
    """One keep-alive HTTP connection to the server (or the load balancer)."""

    def __init__(self, url, api_key, timeout):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise SystemExit(f"loadgen: --url '{url}': give http://HOST:PORT")
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.base = u.path.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.conn = None

    def request(self, method, path, body=None):
        """(status, headers, bytes); reconnects once on a dropped keep-alive."""
        hdrs = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.conn is None:
                cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
                self.conn = cls(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, self.base + path, body=data, headers=hdrs)
                r = self.conn.getresponse()
                payload = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return r.status, r, payload
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def timings_of(obj):
    """What the server says of a job's time: {"queue": s or None, "stages": {stage: s},
    "batch": size or None, "replica": index or None}, from an image answer's `metrics`
    (`seconds`, `queue_seconds`) or a `timings` object (flat: queue, tokenize, ...,
    batch_size, replica), wherever present; missing parts are None / empty."""
    out = {"queue": None, "stages": {}, "batch": None, "replica": None}
    if not isinstance(obj, dict):
        return out
    m = obj.get("metrics") if isinstance(obj.get("metrics"), dict) else {}
    for d in (obj.get("timings"), m.get("timings"), m):
        if not isinstance(d, dict):
            continue
        num = {k: float(v) for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        secs = d.get("seconds") if isinstance(d.get("seconds"), dict) else d
        for k, v in secs.items():
            k = "encode" if k == "write" else k
            if k in STAGES and isinstance(v, (int, float)) and k not in out["stages"]:
                out["stages"][k] = float(v)
        for key, names in (("queue", ("queue", "queue_seconds", "queue_s")), ("batch", ("batch_size",)),
                           ("replica", ("replica",))):
            for n in names:
                if out[key] is None and n in num:
                    out[key] = num[n]
    return out


def retry_after(r):
    try:
        return min(max(float(r.getheader("Retry-After", "1")), 0.05), 30.0)
    except ValueError:
        return 1.0


def post_retrying(cl, path, body):
    """POST body to path, again after Retry-After while the server answers busy
    (429/503): (status, response, payload, how many busy answers)."""
    busy = 0
    while True:
        st, r, payload = cl.request("POST", path, body)
        if st not in (429, 503):
            return st, r, payload, busy
        busy += 1
        time.sleep(retry_after(r))


def run_image(cl, job, steps):
    body = {"prompt": job["prompt"], "size": f'{job["w"]}x{job["h"]}', "seed": job["seed"], "n": 1}
    if steps:
        body["num_inference_steps"] = steps
    st, r, payload, busy = post_retrying(cl, "/v1/images/generations", body)
    if st != 200:
        return {"ok": False, "busy": busy, "error": f"{st} {payload[:200]!r}"}
    res = timings_of(json.loads(payload))
    res.update(ok=True, busy=busy, instance=r.getheader("X-Cosmos3-Instance"))
    return res


def run_video(cl, job, steps, poll_s):
    body = {"prompt": job["prompt"], "size": f'{job["w"]}x{job["h"]}', "num_frames": job["frames"],
            "seed": job["seed"]}
    if steps:
        body["num_inference_steps"] = steps
    st, r, payload, busy = post_retrying(cl, "/v1/videos", body)
    if st != 200:
        return {"ok": False, "busy": busy, "error": f"create {st} {payload[:200]!r}"}
    vid = json.loads(payload)["id"]
    instance = r.getheader("X-Cosmos3-Instance")
    while True:
        time.sleep(poll_s)
        st, r, payload = cl.request("GET", f"/v1/videos/{vid}")
        if st != 200:
            return {"ok": False, "busy": busy, "error": f"poll {st} {payload[:200]!r}"}
        v = json.loads(payload)
        if v.get("status") == "completed":
            break
        if v.get("status") == "failed":
            return {"ok": False, "busy": busy, "error": f"failed: {v.get('error')}"}
    st, r, payload = cl.request("GET", f"/v1/videos/{vid}/content")
    cl.request("DELETE", f"/v1/videos/{vid}")  # keep the server's store small
    if st != 200 or not payload:
        return {"ok": False, "busy": busy, "error": f"content {st}"}
    res = timings_of(v)
    res.update(ok=True, busy=busy, instance=instance, bytes=len(payload))
    return res


def pct(xs, p):
    """The nearest-rank percentile of xs (p in 0..100), or None."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def run_level(args, jobs, conc):
    todo = list(jobs)
    lock = threading.Lock()
    results = []

    def worker():
        cl = Client(args.url, args.api_key, args.timeout)
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    job = todo.pop(0)
                t0 = time.monotonic()
                try:
                    if job["kind"] == "image":
                        res = run_image(cl, job, args.steps)
                    else:
                        res = run_video(cl, job, args.steps, args.poll)
                except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                    cl.close()
                    res = {"ok": False, "busy": 0, "error": f"{type(e).__name__}: {e}"}
                res.update(kind=job["kind"], latency=time.monotonic() - t0, index=job["index"])
                with lock:
                    results.append(res)
        finally:
            cl.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(conc)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ok = [r for r in results if r["ok"]]
    lat = [r["latency"] for r in ok]
    queues = [r["queue"] for r in ok if r.get("queue") is not None]
    stages = {s: statistics.fmean([r["stages"][s] for r in ok if s in r["stages"]])
              for s in STAGES if any(s in r["stages"] for r in ok)}
    by_instance, by_replica = {}, {}
    for r in ok:
        if r.get("instance"):
            by_instance[r["instance"]] = by_instance.get(r["instance"], 0) + 1
        if r.get("replica") is not None:
            k = str(int(r["replica"]))
            by_replica[k] = by_replica.get(k, 0) + 1
    batches = [r["batch"] for r in ok if r.get("batch") is not None]
    errors = [r["error"] for r in results if not r["ok"]]
    return {
        "concurrency": conc, "jobs": len(results), "ok": len(ok), "errors": len(errors),
        "first_errors": errors[:3], "busy": sum(r["busy"] for r in results), "wall_s": wall,
        "jobs_per_min": 60.0 * len(ok) / wall if wall > 0 else 0.0,
        "p50_s": pct(lat, 50), "p99_s": pct(lat, 99),
        "image_p50_s": pct([r["latency"] for r in ok if r["kind"] == "image"], 50),
        "video_p50_s": pct([r["latency"] for r in ok if r["kind"] == "video"], 50),
        "queue_p50_s": pct(queues, 50), "queue_mean_s": statistics.fmean(queues) if queues else None,
        "stage_mean_s": stages, "by_instance": by_instance, "by_replica": by_replica,
        "batch_mean": statistics.fmean(batches) if batches else None,
        "batch_max": max(batches) if batches else None,
    }


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def print_levels(label, levels, out=sys.stdout):
    print(f"\n{label}", file=out)
    head = ("conc", "jobs", "ok", "err", "busy", "jobs/min", "p50 s", "p99 s", "img p50", "clip p50",
            "queue p50", "batch mean/max") + STAGES
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "---|" * len(head), file=out)
    for lv in levels:
        row = [str(lv["concurrency"]), str(lv["jobs"]), str(lv["ok"]), str(lv["errors"]), str(lv["busy"]),
               fmt(lv["jobs_per_min"], ".1f"), fmt(lv["p50_s"]), fmt(lv["p99_s"]), fmt(lv["image_p50_s"]),
               fmt(lv["video_p50_s"]), fmt(lv["queue_p50_s"]),
               f'{fmt(lv["batch_mean"], ".2f")}/{fmt(lv["batch_max"], ".0f")}']
        row += [fmt(lv["stage_mean_s"].get(s), ".4f") for s in STAGES]
        print("| " + " | ".join(row) + " |", file=out)
    for lv in levels:
        if lv["first_errors"]:
            print(f"  concurrency {lv['concurrency']}: {lv['errors']} errors, e.g. {lv['first_errors'][0]}",
                  file=out)


def compare(files, targets="1.5,0.7"):
    runs = []
    for f in files:
        with open(f) as fh:
            runs.append(json.load(fh))
    base = runs[0]
    print(f"throughput (jobs/min) and p50 latency (s); ratios to '{base['label']}' "
          f"(throughput: higher is better; p50: lower is better)")
    head = ["conc"]
    for r in runs:
        head += [f"{r['label']} jobs/min", f"{r['label']} p50"]
        if r is not base:
            head += ["x thr", "x p50"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    base_lv = {lv["concurrency"]: lv for lv in base["levels"]}
    concs = sorted({lv["concurrency"] for r in runs for lv in r["levels"]})
    for c in concs:
        row = [str(c)]
        b = base_lv.get(c)
        for r in runs:
            lv = next((x for x in r["levels"] if x["concurrency"] == c), None)
            row += [fmt(lv and lv["jobs_per_min"], ".1f"), fmt(lv and lv["p50_s"])]
            if r is not base:
                thr = lv["jobs_per_min"] / b["jobs_per_min"] if lv and b and b["jobs_per_min"] else None
                p50 = lv["p50_s"] / b["p50_s"] if lv and b and b["p50_s"] and lv["p50_s"] is not None else None
                row += [fmt(thr, ".2f"), fmt(p50, ".2f")]
        print("| " + " | ".join(row) + " |")
    # issue 32's targets (CPU, demo model): at concurrency 8, throughput at
    # least 1.5x today's and p50 latency at most 0.7x ("none": not judged)
    if targets == "none":
        return
    try:
        t_thr, t_p50 = (float(x) for x in targets.split(","))
    except ValueError:
        raise SystemExit(f"loadgen: --targets '{targets}': give THROUGHPUT,P50 ratios (e.g. 1.5,0.7) or none")
    b = base_lv.get(8)
    for r in runs[1:]:
        lv = next((x for x in r["levels"] if x["concurrency"] == 8), None)
        if not (lv and b and b["jobs_per_min"] and b["p50_s"] and lv["p50_s"] is not None):
            continue
        thr, p50 = lv["jobs_per_min"] / b["jobs_per_min"], lv["p50_s"] / b["p50_s"]
        print(f"at concurrency 8, {r['label']} against {base['label']}: throughput x{thr:.2f} "
              f"(target >= {t_thr:g}: {'met' if thr >= t_thr else 'not met'}), p50 x{p50:.2f} "
              f"(target <= {t_p50:g}: {'met' if p50 <= t_p50 else 'not met'})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="the server or load balancer")
    ap.add_argument("--api-key", default=None, help="sent as 'Authorization: Bearer KEY'")
    ap.add_argument("--concurrency", default="1,2,4,8,16", help="client counts, one level each")
    ap.add_argument("--jobs", type=int, default=48, help="jobs per level (the same sequence every level)")
    ap.add_argument("--mix", default="image:64x64:3,image:96x96:1,image:128x128:1,video:64x64x9:1,video:64x64x17:1",
                    help="image:WxH[:WEIGHT] and video:WxHxFRAMES[:WEIGHT], comma separated")
    ap.add_argument("--steps", type=int, default=0, help="num_inference_steps (0: the model's default)")
    ap.add_argument("--seed", type=int, default=1, help="draws the job sequence and the requests' seeds")
    ap.add_argument("--warmup", type=int, default=2, help="jobs sent once before the levels, not counted")
    ap.add_argument("--warmup-concurrency", type=int, default=1,
                    help="clients sending the warm-up jobs (the level's count lets a batching server "
                         "see its batch shapes before the timing)")
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between polls of a video job")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds an HTTP answer may take")
    ap.add_argument("--label", default="run", help="this run's name in the tables")
    ap.add_argument("--json", default=None, help="write the results here (for --compare)")
    ap.add_argument("--compare", nargs="+", metavar="JSON", help="print runs side by side and exit")
    ap.add_argument("--targets", default="1.5,0.7",
                    help="with --compare: the throughput and p50 ratios judged at concurrency 8 "
                         "(issue 32's), or none")
    args = ap.parse_args()
    if args.compare:
        compare(args.compare, args.targets)
        return 0
    try:
        concs = [int(c) for c in args.concurrency.split(",")]
        assert all(c >= 1 for c in concs)
    except (ValueError, AssertionError):
        raise SystemExit(f"loadgen: --concurrency '{args.concurrency}': give counts such as 1,2,4,8,16")
    if args.jobs < 1:
        raise SystemExit("loadgen: --jobs must be at least 1")
    mix = parse_mix(args.mix)
    cl = Client(args.url, args.api_key, args.timeout)
    try:
        st, _, payload = cl.request("GET", "/health")
    except OSError as e:
        raise SystemExit(f"loadgen: {args.url}: {e}; start the server first (cosmos3 serve)")
    if st != 200:
        raise SystemExit(f"loadgen: {args.url}/health answered {st}: {payload[:200]!r}; wait until it is ready")
    health = json.loads(payload)
    cl.close()
    print(f"loadgen: {args.url} ({health.get('model')}, instance {health.get('instance')}); mix {args.mix}; "
          f"{args.jobs} jobs per level", file=sys.stderr)
    if args.warmup:
        run_level(args, make_jobs(mix, args.warmup, args.seed + 1000), max(1, args.warmup_concurrency))
    levels = []
    jobs = make_jobs(mix, args.jobs, args.seed)
    for c in concs:
        lv = run_level(args, jobs, c)
        levels.append(lv)
        print(f"loadgen: concurrency {c}: {lv['ok']}/{lv['jobs']} ok, {lv['jobs_per_min']:.1f} jobs/min, "
              f"p50 {fmt(lv['p50_s'])} s, p99 {fmt(lv['p99_s'])} s", file=sys.stderr)
    print_levels(f"{args.label}: {args.url}, mix {args.mix}", levels)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"label": args.label, "url": args.url, "model": health.get("model"), "mix": args.mix,
                       "jobs": args.jobs, "steps": args.steps, "levels": levels}, fh, indent=1)
    return 1 if any(lv["errors"] for lv in levels) else 0


if __name__ == "__main__":
    sys.exit(main())
