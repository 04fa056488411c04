#!/usr/bin/env python3
"""Consistency checks of the shipped deployment files (no Docker engine or cluster needed).

usage: check_deploy.py --root SRC --metrics SCRAPE_FILE [--dashboard JSON] [--alerts YAML] [--server-help FILE]
SCRAPE_FILE is the text exposition of a fully populated srformer Metrics (written by
tests/metrics/deploy_files_test.cc): the families it registers, their labels and the values of the fixed ones.
Prints one line per problem; exit 1 if any.
"""
import argparse
import json
import os
import re
import sys

import yaml

problems = []


def check(cond, msg):
    if not cond:
        problems.append(msg)
    return cond


# ---------------------------------------------------------------- PromQL metric names
PROMQL_WORDS = {
    "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile", "abs", "ceil",
    "floor", "round", "clamp", "clamp_min", "clamp_max", "scalar", "vector", "time", "absent", "label_replace",
    "label_join", "avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "count_over_time",
    "quantile_over_time", "last_over_time", "changes", "resets", "predict_linear", "sort", "sort_desc", "inf",
    "nan", "le",
}


def metric_names(expr):
    """Metric names referenced by a PromQL expression (or a Grafana label_values(...) query)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers (and Grafana $vars inside them)
    expr = re.sub(r"label_values\(([^,)]*)(,[^)]*)?\)", r"(\1)", expr)  # keep the series selector only
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\w+", "", expr)
    names = re.findall(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", expr)
    return {n for n in names if n not in PROMQL_WORDS}


def load_registered(path):
    """Series names a scrape can contain (families, plus _bucket/_sum/_count of histograms), and for each the
    labels its samples carry with the values seen."""
    labels = {}
    with open(path) as f:
        for line in f:
            if line.startswith("# TYPE "):
                name, kind = line.split()[2:4]
                labels.setdefault(name, {})
                if kind == "histogram":
                    for suffix in ("_bucket", "_sum", "_count"):
                        labels.setdefault(name + suffix, {})
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
            if not m or line.startswith("#"):
                continue
            series = labels.setdefault(m.group(1), {})
            for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""):
                series.setdefault(k, set()).add(v)
    return labels


# Labels Prometheus attaches to every series of a target (scrape config, kubernetes_sd), not the server.
TARGET_LABELS = {"job", "instance", "namespace", "pod"}
# Labels with a fixed set of values (the populated scrape holds them all): a matcher must name one of them.
FIXED_VALUE_LABELS = {"reason", "result", "form"}
GRPC_CODES = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
              "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
              "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}


def closing_paren(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text)


def check_labels(where, expr, labels):
    """The labels an expression matches on or aggregates by are ones its metrics carry, with values they take."""
    for name, body in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr):
        if name not in labels:
            continue  # an unregistered name is reported by the caller
        for label, op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', body):
            if label in TARGET_LABELS:
                continue
            if not check(label in labels[name], f"{where}: {name} has no label {label} (it has {sorted(labels[name])})"):
                continue
            if label in FIXED_VALUE_LABELS and op == "=":
                check(value in labels[name][label],
                      f'{where}: {name}{{{label}="{value}"}} matches nothing (its values: {sorted(labels[name][label])})')
            if label == "code" and op in ("=", "=~"):
                for code in value.split("|"):
                    check(code in GRPC_CODES, f"{where}: {name}: {code} is not a gRPC status code name")
    for m in re.finditer(r"\bby\s*\(([^)]*)\)\s*\(", expr):
        argument = expr[m.end() - 1:closing_paren(expr, m.end() - 1) + 1]
        for label in (x.strip() for x in m.group(1).split(",")):
            if not label or label in TARGET_LABELS:
                continue
            for name in metric_names(argument):
                if name in labels:
                    check(label in labels[name] or (label == "le" and name.endswith("_bucket")),
                          f"{where}: sums {name} by {label}, a label it does not have")


# ---------------------------------------------------------------- files
def load_yaml(root, rel, multi=False):
    path = os.path.join(root, rel)
    if not check(os.path.isfile(path), f"{rel}: missing"):
        return [] if multi else {}
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d] if multi else (yaml.safe_load(f) or {})
    except yaml.YAMLError as e:
        check(False, f"{rel}: not valid YAML: {e}")
        return [] if multi else {}


def flag_value(args, flag):
    args = [str(a) for a in args or []]
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def port_of(address):
    return int(str(address).rsplit(":", 1)[1])


def check_compose(root, grpc_port, metrics_port, known_flags=None):
    compose = load_yaml(root, "docker-compose.yml")
    services = compose.get("services", {})
    for name in ("srformer", "prometheus", "grafana"):
        check(name in services, f"docker-compose.yml: no service '{name}'")
    srf = services.get("srformer", {})
    check(srf.get("build", {}).get("target") == "cpu", "docker-compose.yml: srformer must build the Dockerfile's cpu target")
    cmd = srf.get("command", [])
    if known_flags is not None:
        check_flags("docker-compose.yml", cmd, known_flags)
    check(flag_value(cmd, "--listen") and port_of(flag_value(cmd, "--listen")) == grpc_port,
          f"docker-compose.yml: srformer --listen must use port {grpc_port}")
    check(flag_value(cmd, "--metrics-listen") and port_of(flag_value(cmd, "--metrics-listen")) == metrics_port,
          f"docker-compose.yml: srformer --metrics-listen must use port {metrics_port}")
    published = {int(str(p).split(":")[-1]) for p in srf.get("ports", [])}
    check({grpc_port, metrics_port} <= published, f"docker-compose.yml: srformer must publish {grpc_port} and {metrics_port}")
    check(any(str(v).endswith(":/models:ro") for v in srf.get("volumes", [])),
          "docker-compose.yml: srformer needs the models volume at /models (read-only)")

    mounts = {}  # container path -> host path, for every ./ bind mount of every service
    for sname, svc in services.items():
        for v in svc.get("volumes", []):
            parts = str(v).split(":")
            if parts[0].startswith("./"):
                check(os.path.exists(os.path.join(root, parts[0])), f"docker-compose.yml: {sname} mounts missing {parts[0]}")
                mounts[parts[1]] = parts[0]

    # Prometheus: config mounted, its rule files mounted beside it, and it scrapes the srformer service.
    prom_cmd = services.get("prometheus", {}).get("command", [])
    cfg_in_container = next((a.split("=", 1)[1] for a in prom_cmd if str(a).startswith("--config.file=")),
                            "/etc/prometheus/prometheus.yml")
    check(cfg_in_container in mounts, f"docker-compose.yml: prometheus config {cfg_in_container} is not mounted")
    prom = load_yaml(root, "deploy/prometheus/prometheus.yml")
    for rule in prom.get("rule_files", []):
        target = os.path.join(os.path.dirname(cfg_in_container), rule)
        check(target in mounts, f"docker-compose.yml: rule file {target} (prometheus.yml rule_files) is not mounted")
    targets = [t for sc in prom.get("scrape_configs", []) if sc.get("job_name") == "srformer"
               for st in sc.get("static_configs", []) for t in st.get("targets", [])]
    check(f"srformer:{metrics_port}" in targets, f"prometheus.yml: job srformer must scrape srformer:{metrics_port}")

    # Grafana: provisioning mounted; dashboards provider path is where the dashboards dir is mounted.
    gsvc = services.get("grafana", {})
    env = gsvc.get("environment", {})
    check(str(env.get("GF_AUTH_ANONYMOUS_ENABLED")).lower() == "true" and env.get("GF_AUTH_ANONYMOUS_ORG_ROLE") == "Viewer",
          "docker-compose.yml: grafana must allow anonymous viewers")
    check(mounts.get("/etc/grafana/provisioning") == "./deploy/grafana/provisioning",
          "docker-compose.yml: grafana must mount deploy/grafana/provisioning at /etc/grafana/provisioning")
    prov = load_yaml(root, "deploy/grafana/provisioning/dashboards/srformer.yml")
    for p in prov.get("providers", []):
        path = p.get("options", {}).get("path")
        check(path in mounts and os.path.isdir(os.path.join(root, mounts.get(path, ""))),
              f"grafana dashboards provider path {path} is not a mounted directory")
    home = env.get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        d, f = os.path.split(home)
        check(d in mounts and os.path.isfile(os.path.join(root, mounts[d], f)), f"grafana home dashboard {home} is not mounted")
    ds = load_yaml(root, "deploy/grafana/provisioning/datasources/prometheus.yml").get("datasources", [])
    prom_ports = {int(str(p).split(":")[-1]) for p in services.get("prometheus", {}).get("ports", [])}
    check(any(d.get("url") in {f"http://prometheus:{p}" for p in prom_ports} for d in ds),
          "grafana datasource must point at the prometheus service's port")

    gpu = load_yaml(root, "docker-compose.gpu.yml")
    gsrf = gpu.get("services", {}).get("srformer", {})
    check(gsrf.get("build", {}).get("target") == "cuda", "docker-compose.gpu.yml: srformer must build the cuda target")
    devices = gsrf.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    check(any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices),
          "docker-compose.gpu.yml: srformer must reserve an nvidia gpu device")
    return [d.get("uid") for d in ds]


def check_dockerfile(root, grpc_port, metrics_port):
    path = os.path.join(root, "Dockerfile")
    if not check(os.path.isfile(path), "Dockerfile: missing"):
        return
    text = open(path).read()
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M | re.I)
    check("cpu" in stages and "cuda" in stages, f"Dockerfile: needs stages cpu and cuda, has {stages}")
    check(stages and stages[-1] == "cpu", "Dockerfile: the cpu stage must be last (the default target)")
    check(re.search(r"RUN bash \S*deploy/setup-deps\.sh\s*(&&|$)", text, re.M), "Dockerfile: build stage must run deploy/setup-deps.sh")
    check("setup-deps.sh --runtime" in text, "Dockerfile: runtime stage must run setup-deps.sh --runtime")
    check("deploy/gpu/fetch-debs.sh" in text and "deploy/gpu/build.sh" in text, "Dockerfile: cuda stages must use deploy/gpu scripts")
    for src in re.findall(r"^COPY\s+(?!--from)(\S+)\s", text, re.M):
        check(os.path.exists(os.path.join(root, src)), f"Dockerfile: COPY source {src} does not exist")
    for stage in ("cpu", "cuda"):
        m = re.search(rf"^FROM\s+\S+\s+AS\s+{stage}\s*$(.*?)(?=^FROM|\Z)", text, re.M | re.S)
        body = m.group(1) if m else ""
        users = re.findall(r"^USER\s+(\S+)", body, re.M)
        check(users and users[-1] not in ("0", "root"), f"Dockerfile: stage {stage} must run as a non-root USER")
        exposed = {int(p) for line in re.findall(r"^EXPOSE\s+(.*)$", body, re.M) for p in line.split()}
        check({grpc_port, metrics_port} <= exposed, f"Dockerfile: stage {stage} must EXPOSE {grpc_port} {metrics_port}")
        check(re.search(r"^VOLUME\s+.*/models", body, re.M), f"Dockerfile: stage {stage} needs VOLUME /models")
        check(re.search(r"^HEALTHCHECK\s.*--health", body, re.M | re.S), f"Dockerfile: stage {stage} needs a gRPC HEALTHCHECK")


def check_job_chosen(where, expr):
    """Every series selector keeps to the job chosen: the instance variable's "All" is ".*", and without the job
    a Prometheus scraping two srformer jobs (staging and production) showed both whichever job was chosen."""
    for m in re.finditer(r"(?<![\w$])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", expr):
        name = m.group(1)
        if not (name.startswith("srformer_") or name.startswith("process_")):
            continue
        check(re.search(r'\bjob\s*=~\s*"\$job"', m.group(2) or ""),
              f"{where}: {name} is not limited to the chosen job (job=~\"$job\"): {expr}")


def watched_in_docs(root):
    """The series docs/OPERATIONS.md's knobs table tells an operator to watch for each flag."""
    doc = open(os.path.join(root, "docs/OPERATIONS.md")).read()
    start = doc.find("\n## Latency and throughput knobs at a glance\n")
    table = doc[start:doc.find("\n## ", start + 1)] if start >= 0 else ""
    return set(re.findall(r"`((?:srformer|process)_[a-z_]+)", table))


AGGREGATION = re.compile(r"\b(sum|avg|min|max|count|stddev|stdvar|topk|bottomk|quantile|count_values|group|"
                         r"histogram_quantile)\b")


def check_legend_names_instance(where, target):
    """A query that keeps one series per instance names the instance in its legend: with several chosen (the
    instance variable's "All"), series of different servers otherwise showed under one name."""
    expr = target.get("expr", "")
    per_instance = not AGGREGATION.search(expr) or re.search(r"\bby\s*\([^)]*\binstance\b", expr)
    check(not per_instance or "{{instance}}" in target.get("legendFormat", ""),
          f"{where}: legend '{target.get('legendFormat', '')}' does not name the instance of a per-instance series: {expr}")


def check_dashboard(root, path, registered, datasource_uids):
    try:
        dash = json.load(open(path))
    except (OSError, ValueError) as e:
        check(False, f"{path}: not valid JSON: {e}")
        return
    used = set()
    ids = []
    for panel in dash.get("panels", []):
        ids.append(panel.get("id"))
        if panel.get("type") == "row":
            continue
        title = panel.get("title")
        targets = panel.get("targets", [])
        check(targets, f"dashboard panel '{title}': no queries")
        uid = panel.get("datasource", {}).get("uid")
        check(uid == "${datasource}", f"dashboard panel '{title}': datasource uid {uid} is not the $datasource variable")
        for t in targets:
            if "datasource" in t:
                tuid = t["datasource"].get("uid")
                check(tuid == "${datasource}", f"dashboard panel '{title}': a query's datasource uid {tuid} is not the $datasource variable")
            check(not re.search(r'\bjob\s*=\s*"', t.get("expr", "")),
                  f"dashboard panel '{title}': a fixed job name (Kubernetes scrapes name jobs otherwise; use $job): {t.get('expr')}")
            names = metric_names(t.get("expr", ""))
            check(names, f"dashboard panel '{title}': query names no metric: {t.get('expr')}")
            check_job_chosen(f"dashboard panel '{title}'", t.get("expr", ""))
            check_legend_names_instance(f"dashboard panel '{title}'", t)
            for n in names:
                check(n in registered, f"dashboard panel '{title}': metric {n} is not registered by Metrics")
            check_labels(f"dashboard panel '{title}'", t.get("expr", ""), registered)
            used |= names
    check(len(ids) == len(set(ids)), "dashboard: panel ids are not unique")
    variables = dash.get("templating", {}).get("list", [])
    # The datasource and the job are chosen in the dashboard, not fixed: an existing Grafana has its own
    # datasource uids, and a Kubernetes scrape names its job after the PodMonitor or scrape config.
    check(any(v.get("name") == "datasource" and v.get("type") == "datasource" and v.get("query") == "prometheus"
              for v in variables), "dashboard: needs a 'datasource' variable of type datasource (prometheus)")
    check(any(v.get("name") == "job" and v.get("type") == "query" for v in variables), "dashboard: needs a 'job' variable")
    check(any(d is not None for d in datasource_uids), "grafana provisioning: the datasource needs a uid")
    for var in variables:
        if var.get("type") == "query":
            uid = var.get("datasource", {}).get("uid")
            check(uid == "${datasource}", f"dashboard variable '{var.get('name')}': datasource uid {uid} is not $datasource")
        else:
            continue  # a datasource variable's query is a plugin type, not PromQL
        q = var.get("query", {})
        if var.get("name") != "job":
            check_job_chosen(f"dashboard variable '{var.get('name')}'", q.get("query", "") if isinstance(q, dict) else str(q))
        for n in metric_names(q.get("query", "") if isinstance(q, dict) else str(q)):
            check(n in registered, f"dashboard variable '{var.get('name')}': metric {n} is not registered")
    for required in ("srformer_generated_tokens_total", "srformer_requests_total",
                     "srformer_time_to_first_token_seconds_bucket", "srformer_inter_token_seconds_bucket",
                     "srformer_request_duration_seconds_bucket", "srformer_queue_depth", "srformer_batch_size_count",
                     "srformer_state_bytes", "srformer_state_held_bytes", "srformer_gpu_utilization_ratio",
                     "srformer_gpu_memory_used_bytes", "srformer_gpu_power_watts", "srformer_raf_fired_ratio",
                     "srformer_cross_attention_kv_read_total", "srformer_cross_attention_kv_full_equivalent_total",
                     "srformer_stream_unread_bytes", "srformer_response_unread_bytes", "srformer_streams_stalled_total"):
        check(required in used, f"dashboard: no panel shows {required}")
    for watched in sorted(watched_in_docs(root)):
        check(watched in used or watched + "_bucket" in used,
              f"dashboard: no panel shows {watched}, which docs/OPERATIONS.md's knobs table says to watch")


def check_alerts(root, path, registered):
    data = yaml.safe_load(open(path)) or {}
    # Every alert has its entry in docs/OPERATIONS.md's runbook (what to look at when it fires) and a promtool
    # test that evaluates it: one added without them paged with nothing to go on, or never fired as written.
    doc = open(os.path.join(root, "docs/OPERATIONS.md")).read()
    start = doc.find("\n## Alerts\n")
    runbook = doc[start:doc.find("\n## ", start + 1)] if start >= 0 else ""
    tests = load_yaml(root, "tests/metrics/alerts_test.yml").get("tests", [])
    tested = {t.get("alertname") for test in tests for t in test.get("alert_rule_test", [])}
    for group in data.get("groups", []):
        for rule in group.get("rules", []):
            name = rule.get("alert")
            for n in metric_names(rule.get("expr", "")):
                check(n in registered or n == "up", f"alert {name}: metric {n} is not registered")
            check_labels(f"alert {name}", rule.get("expr", ""), registered)
            check(re.search(rf"^- `{re.escape(str(name))}`", runbook, re.M),
                  f"alert {name}: no entry '- `{name}`' in docs/OPERATIONS.md's Alerts section")
            check(name in tested, f"alert {name}: tests/metrics/alerts_test.yml does not test it")


def check_flags(where, args, known):
    """Every --flag in a shipped command line is one srformer-server's --help names."""
    for a in [str(x) for x in args or []]:
        if a.startswith("--"):
            flag = a.split("=", 1)[0]
            check(flag in known, f"{where}: srformer-server has no flag {flag}")


def check_k8s(root, registered, grpc_port, metrics_port, known_flags=None):
    docs = []
    for rel in ("deploy/k8s/deployment.yaml", "deploy/k8s/service.yaml", "deploy/k8s/hpa.yaml",
                "deploy/k8s/prometheus-adapter.yaml", "deploy/k8s/podmonitor.yaml"):
        docs += load_yaml(root, rel, multi=True)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
    deps = by_kind.get("Deployment", [])
    if not check(len(deps) == 1, "k8s: expected one Deployment"):
        return
    dep = deps[0]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    check(dep["spec"]["selector"]["matchLabels"].items() <= labels.items(), "k8s: Deployment selector does not match its pods")
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check(ports.get("grpc") == grpc_port and ports.get("metrics") == metrics_port,
          f"k8s: container ports must be grpc={grpc_port}, metrics={metrics_port}")
    if known_flags is not None:
        check_flags("k8s", c.get("args"), known_flags)
    check(port_of(flag_value(c.get("args"), "--listen") or ":0") == grpc_port, "k8s: --listen port differs from the grpc port")
    check(port_of(flag_value(c.get("args"), "--metrics-listen") or ":0") == metrics_port,
          "k8s: --metrics-listen port differs from the metrics port")
    res = c.get("resources", {})
    check(str(res.get("requests", {}).get("nvidia.com/gpu")) == "1" and str(res.get("limits", {}).get("nvidia.com/gpu")) == "1",
          "k8s: container must request and limit nvidia.com/gpu: 1")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check(c.get(probe, {}).get("grpc", {}).get("port") == grpc_port, f"k8s: {probe} must be a grpc probe on {grpc_port}")
    ann = pod["metadata"].get("annotations", {})
    check(ann.get("prometheus.io/port") == str(metrics_port), "k8s: prometheus.io/port annotation differs from metrics port")
    check(pod["spec"].get("securityContext", {}).get("runAsNonRoot") is True, "k8s: pod must run as non-root")
    claims = {v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["spec"].get("volumes", [])}
    pvcs = {d["metadata"]["name"] for d in by_kind.get("PersistentVolumeClaim", [])}
    check(claims - {None} <= pvcs, "k8s: Deployment uses a PVC that is not defined")

    services = by_kind.get("Service", [])
    check(any(s["spec"].get("clusterIP") == "None" for s in services), "k8s: needs a headless Service (clusterIP: None)")
    for s in services:
        check(s["spec"]["selector"].items() <= labels.items(), f"k8s: Service {s['metadata']['name']} selects no pod")
        for p in s["spec"]["ports"]:
            check(p.get("targetPort") in ports or p.get("targetPort") in ports.values(),
                  f"k8s: Service {s['metadata']['name']} targets unknown port {p.get('targetPort')}")
    # The PodMonitor scrapes the pods' metrics port under the job name the alert rules match.
    alert_jobs = set(re.findall(r'\bjob\s*=\s*"([^"]*)"', open(os.path.join(root, "deploy/prometheus/alerts.yml")).read()))
    monitors = by_kind.get("PodMonitor", [])
    check(len(monitors) == 1, "k8s: expected one PodMonitor")
    for pm in monitors:
        spec = pm.get("spec", {})
        check(spec.get("selector", {}).get("matchLabels", {}).items() <= labels.items(), "k8s: the PodMonitor selects no pod")
        check(all(e.get("port") in ports for e in spec.get("podMetricsEndpoints", [])) and spec.get("podMetricsEndpoints"),
              "k8s: the PodMonitor must scrape the pods' named metrics port")
        job = labels.get(spec.get("jobLabel"))
        check(alert_jobs <= {job}, f"k8s: the PodMonitor's job ({job}, from jobLabel) is not the alerts' job {sorted(alert_jobs)}")
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        check(hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"], "k8s: HPA targets another Deployment")
        for m in hpa["spec"].get("metrics", []):
            name = m.get("pods", {}).get("metric", {}).get("name")
            check(name in registered, f"k8s: HPA metric {name} is not registered by Metrics")
    for cm in by_kind.get("ConfigMap", []):
        for rule in yaml.safe_load(cm["data"]["config.yaml"]).get("rules", []):
            for n in metric_names(rule.get("seriesQuery", "")):
                check(n in registered, f"k8s: prometheus-adapter rule names unregistered metric {n}")
            check_labels("k8s: prometheus-adapter rule", rule.get("seriesQuery", ""), registered)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--dashboard")
    ap.add_argument("--alerts")
    ap.add_argument("--server-help", help="srformer-server --help output: the flags the command lines may use")
    a = ap.parse_args()
    registered = load_registered(a.metrics)
    known_flags = None
    if a.server_help:
        with open(a.server_help) as f:
            known_flags = set(re.findall(r"--[a-z][a-z0-9-]*", f.read()))
    grpc_port, metrics_port = 50051, 9464  # srformer-server defaults (server/config.h)
    uids = check_compose(a.root, grpc_port, metrics_port, known_flags)
    check_dockerfile(a.root, grpc_port, metrics_port)
    check_dashboard(a.root, a.dashboard or os.path.join(a.root, "deploy/grafana/dashboards/srformer.json"), registered, uids)
    check_alerts(a.root, a.alerts or os.path.join(a.root, "deploy/prometheus/alerts.yml"), registered)
    check_k8s(a.root, registered, grpc_port, metrics_port, known_flags)
    for p in problems:
        print(p)
    print(f"check_deploy: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
