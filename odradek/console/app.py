"""The console's web application (Flask): one route per page, rendered on the server with Jinja2 templates.

Pages: ``/`` the cluster (controllers, the active one, brokers alive or fenced, health, sizes), ``/topics``
and ``/topics/<name>`` (partitions with leader, replicas, ISR and sizes, under-replicated ones highlighted;
configs, editable), ``/topics/new`` (create a topic), ``/groups`` and ``/groups/<id>`` (members,
assignment, lag per partition and lag over time), ``/messages`` (the message browser). ``/healthz``
answers ``ok`` for container health checks.

The pages need no JavaScript; the charts are inline SVG and the one stylesheet is served from the package,
so nothing is fetched from anywhere but the console itself. A page that cannot get an answer from the
cluster says so in one sentence (status 502; 404 for a topic or group that does not exist).

Thread-safety: the application is served by a threaded WSGI server; what it shares (the
:class:`~odradek.console.model.ClusterView` and the lag sampler) is thread-safe.
"""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask, flash, g, redirect, render_template, request, url_for
from markupsafe import Markup
from werkzeug.wrappers import Response

from odradek.cli_support import format_size
from odradek.console.charts import line_chart
from odradek.console.lag import LagSampler
from odradek.console.messages import FORMATS, browse, render
from odradek.console.model import ClusterView, parse_configs
from odradek.errors import GroupIdNotFoundError, OdradekError, UnknownTopicOrPartitionError

HERE = Path(__file__).resolve().parent


def create_app(view: ClusterView, sampler: LagSampler, *, title: str = "Odradek console") -> Flask:
    """The console application over ``view`` (its clients) and ``sampler`` (lag history)."""
    app = Flask("odradek.console", template_folder=str(HERE / "templates"), static_folder=str(HERE / "static"))
    app.secret_key = secrets.token_bytes(32)  # flash messages only; nothing outlives the process
    app.config["TITLE"] = title
    app.jinja_env.filters.update(size=format_size, ts=format_timestamp, num=format_number)
    app.jinja_env.globals.update(render_value=render, FORMATS=FORMATS)

    @app.before_request
    def _start_timer() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def _timing(response: Response) -> Response:
        elapsed_ms = (time.perf_counter() - g.get("started", time.perf_counter())) * 1000
        response.headers["Server-Timing"] = f"app;dur={elapsed_ms:.1f}"
        return response

    @app.context_processor
    def _common() -> dict[str, Any]:
        return {"title": app.config["TITLE"], "bootstrap": view.client_config.get("bootstrap.servers", "")}

    @app.errorhandler(OdradekError)
    def _cluster_error(exc: OdradekError) -> tuple[str, int]:
        missing = isinstance(exc, UnknownTopicOrPartitionError | GroupIdNotFoundError)
        return render_template("error.html", error=exc, page="error"), 404 if missing else 502

    @app.get("/healthz")
    def healthz() -> str:
        return "ok"

    @app.get("/")
    def overview() -> str:
        return render_template("overview.html", page="overview", o=view.overview())

    @app.get("/topics")
    def topics() -> str:
        internal = request.args.get("internal") == "1"
        return render_template("topics.html", page="topics", topics=view.topics(include_internal=internal),
                               internal=internal)  # fmt: skip

    @app.route("/topics/new", methods=["GET", "POST"])
    def new_topic() -> Any:
        form = {"name": "", "partitions": "3", "replication_factor": "3", "configs": ""}
        if request.method == "GET":
            return render_template("topic_new.html", page="topics", form=form, error=None)
        form = {key: request.form.get(key, "").strip() for key in form}
        try:
            if not form["name"]:
                raise ValueError("a topic needs a name")
            view.create_topic(form["name"], int(form["partitions"]), int(form["replication_factor"]),
                              parse_configs(form["configs"]))  # fmt: skip
        except (ValueError, OdradekError) as exc:
            return render_template("topic_new.html", page="topics", form=form, error=str(exc)), 400
        flash(f"Created topic {form['name']}.")
        return redirect(url_for("topic", name=form["name"]))

    @app.get("/topics/<path:name>")
    def topic(name: str) -> str:
        return render_template("topic.html", page="topics", t=view.topic(name))

    @app.post("/topics/<path:name>/configs")
    def alter_configs(name: str) -> Any:
        key = request.form.get("key", "").strip()
        value = request.form.get("value", "").strip()
        delete = request.form.get("action") == "delete"
        try:
            if not key:
                raise ValueError("give the config key to change")
            view.alter_topic_configs(name, {key: None if delete else value})
        except (ValueError, OdradekError) as exc:
            flash(f"Could not change {key or 'the config'}: {exc}", "error")
        else:
            flash(f"{key} reset to its default." if delete else f"{key} set to {value}.")
        return redirect(url_for("topic", name=name) + "#configs")

    @app.get("/groups")
    def groups() -> str:
        return render_template("groups.html", page="groups", groups=view.groups())

    @app.get("/groups/<path:group_id>")
    def group(group_id: str) -> str:
        described = view.group(group_id)
        history = sampler.history(group_id)
        series: dict[str, list[tuple[float, float]]] = {"total": [(s.time_s, s.total) for s in history]}
        for topic_name in sorted({tp.topic for s in history for tp in s.lags}):
            series[topic_name] = [(s.time_s, sum(v for tp, v in s.lags.items() if tp.topic == topic_name))
                                  for s in history]  # fmt: skip
        if len(series) == 2:  # one topic: its line is the total's
            series.pop(next(k for k in series if k != "total"))
        chart = Markup(line_chart(series, unit="records"))  # noqa: S704 (our own SVG; names are escaped)
        return render_template("group.html", page="groups", gr=described, chart=chart, samples=len(history),
                               interval=sampler.interval_s)  # fmt: skip

    @app.get("/messages")
    def messages() -> str:
        args = request.args
        names = [t.name for t in view.topics(include_internal=False)]
        topic_name = args.get("topic") or (names[0] if names else "")
        page = None
        form = {"topic": topic_name, "partition": args.get("partition", "0"), "mode": args.get("mode", "latest"),
                "offset": args.get("offset", "0"), "timestamp": args.get("timestamp", ""),
                "limit": args.get("limit", "50"), "format": args.get("format", "auto")}  # fmt: skip
        error = None
        if topic_name and "topic" in args:
            try:
                page = browse(view.client_config, topic_name, int(form["partition"]), limit=int(form["limit"]),
                              **_start(form))  # fmt: skip
            except ValueError as exc:
                error = str(exc)
        return render_template("messages.html", page="messages", topics=names, form=form, result=page,
                               error=error)  # fmt: skip

    return app


def _start(form: Mapping[str, str]) -> dict[str, int]:
    """The browse's start (``offset`` or ``timestamp_ms``) from the form; none: the newest records."""
    if form["mode"] == "offset":
        return {"offset": int(form["offset"] or 0)}
    if form["mode"] == "timestamp":
        if not form["timestamp"]:
            raise ValueError("give a date and time to start from")
        moment = datetime.datetime.fromisoformat(form["timestamp"])
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        return {"timestamp_ms": int(moment.timestamp() * 1000)}
    return {}


def format_timestamp(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_number(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"
