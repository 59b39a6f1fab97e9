"""Which containers run the podserve gateway, and which ConfigMap key their `--config`
file is: what the gateway lint rules (rules/gateway.py, rules/routing.py) read.

The config is found the way the kubelet lays the files out, not by guessing from names:
the `--config` path is matched against the container's volumeMounts (the deepest mount
wins, as nested mounts shadow the one above them; `subPath` mounts one entry of the
volume), and the volume's files are its ConfigMap's keys, or the `items` key → path
mapping when one is given, for `configMap` volumes and each `configMap` source of a
`projected` volume (Kubernetes docs, "Volumes" → configMap, projected; "Use a
ConfigMap" → "Add ConfigMap data to a specific path in the Volume").
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.pods import PodView
from podserve.kube.types import Document

_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}
# `python -m podserve.cli.main` runs the same main() as the `podserve` script
# (pyproject.toml [project.scripts]).
_MODULES = {"podserve.cli.main"}
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True, slots=True)
class GatewayContainer:
    spec: Mapping[str, Any]
    config: str | None  # the --config path; None when the gateway was not given one


@dataclass(frozen=True, slots=True)
class ConfigFile:
    config_map: Document
    key: str
    body: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str((self.config_map.manifest.get("metadata") or {}).get("name"))


def _words(container: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The argv (and whether it is a shell script's words): a `sh -c SCRIPT` is split into
    the script's words. The kubelet runs command + args as given, with no shell of its own."""
    argv = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    shell = len(argv) >= 3 and posixpath.basename(argv[0]) in _SHELLS
    if shell and re.fullmatch(r"-[a-z]*c", argv[1]):  # -c, -ec, -lc ...
        try:
            return shlex.split(argv[2], comments=True), True
        except ValueError:  # unbalanced quotes: the shell would refuse it too
            return [], True
    return argv, False


def _runs_podserve(words: list[str], at: int, shell: bool) -> bool:
    """Whether words[at] ("gateway") is the subcommand of a podserve invocation."""
    if at == 0:
        return not shell  # args only, after the image's ENTRYPOINT (podserve's own image)
    before = words[at - 1]
    if before.endswith("podserve"):  # podserve, /usr/local/bin/podserve, .venv/bin/podserve
        return True
    return before in _MODULES and at >= 2 and words[at - 2] == "-m"


def _expand(path: str, container: Mapping[str, Any], shell: bool) -> str:
    """`$(VAR)` from the container's literal env, as the kubelet expands it in command and
    args; in a shell script also `$VAR` and `${VAR}`, as the shell does. Unknown ones stay."""
    env = {
        str(e.get("name")): str(e["value"])
        for e in container.get("env") or []
        if isinstance(e, Mapping) and "value" in e
    }

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, match.group(0))

    path = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), path)
    return _VARIABLE.sub(value, path) if shell else path


def gateway_container(pod: PodView) -> GatewayContainer | None:
    """The container running `podserve gateway` (not `gateway keys`/`spend`)."""
    for ctr in pod.containers():
        words, shell = _words(ctr.spec)
        for at, word in enumerate(words):
            if word != "gateway" or not _runs_podserve(words, at, shell):
                continue
            rest = words[at + 1 :]
            if rest[:1] in (["keys"], ["spend"]):
                continue
            for i, arg in enumerate(rest):
                if arg == "--config" and i + 1 < len(rest):
                    return GatewayContainer(ctr.spec, _expand(rest[i + 1], ctr.spec, shell))
                if arg.startswith("--config="):
                    path = arg.split("=", 1)[1]
                    return GatewayContainer(ctr.spec, _expand(path, ctr.spec, shell))
            return GatewayContainer(ctr.spec, None)
    return None


def _config_map(ctx: LintContext, namespace: str, name: Any) -> Document | None:
    for doc in ctx.of_kind("ConfigMap"):
        meta = doc.manifest.get("metadata") or {}
        if meta.get("name") == name and str(meta.get("namespace", "")) == namespace:
            return doc
    return None


def _source_files(
    ctx: LintContext, namespace: str, source: Mapping[str, Any]
) -> Iterator[tuple[str, Document, str]]:
    """(path inside the volume, ConfigMap, key) of a configMap volume or projected source."""
    doc = _config_map(ctx, namespace, source.get("name"))
    if doc is None:
        return
    data = doc.manifest.get("data") or {}
    items = source.get("items")
    if items:  # only the listed keys, each at its own path
        for item in items:
            if isinstance(item, Mapping) and item.get("key") in data:
                yield posixpath.normpath(str(item.get("path"))), doc, str(item["key"])
    else:
        for key in data:
            yield str(key), doc, str(key)


def _volume_files(
    ctx: LintContext, namespace: str, volume: Mapping[str, Any]
) -> Iterator[tuple[str, Document, str]]:
    if isinstance(volume.get("configMap"), Mapping):
        yield from _source_files(ctx, namespace, volume["configMap"])
    projected = volume.get("projected")
    if isinstance(projected, Mapping):
        for source in projected.get("sources") or []:
            if isinstance(source, Mapping) and isinstance(source.get("configMap"), Mapping):
                yield from _source_files(ctx, namespace, source["configMap"])


def _mounted_files(
    ctx: LintContext, pod: PodView, container: Mapping[str, Any]
) -> Iterator[tuple[str, Document, str]]:
    """(absolute path, ConfigMap, key) of each ConfigMap file the container sees."""
    volumes = {str(v.get("name")): v for v in pod.volumes() if isinstance(v, Mapping)}
    mounts = [
        (posixpath.normpath(str(m.get("mountPath"))), m)
        for m in container.get("volumeMounts") or []
        if isinstance(m, Mapping) and m.get("mountPath")
    ]
    for at, mount in mounts:
        volume = volumes.get(str(mount.get("name")))
        if volume is None:
            continue
        sub = posixpath.normpath(str(mount["subPath"])) if mount.get("subPath") else None
        for rel, doc, key in _volume_files(ctx, pod.namespace, volume):
            if sub is None:
                path = posixpath.join(at, rel)
            elif rel == sub:
                path = at
            elif rel.startswith(f"{sub}/"):
                path = posixpath.join(at, rel[len(sub) + 1 :])
            else:
                continue
            # a deeper mount over this file's directory (or the file itself) hides it
            if any(
                len(other) > len(at) and (path == other or path.startswith(f"{other}/"))
                for other, _ in mounts
            ):
                continue
            yield path, doc, key


def _parsed(text: Any) -> Mapping[str, Any] | None:
    try:
        body: Any = yaml.safe_load(str(text))
    except yaml.YAMLError:
        return None
    return body if isinstance(body, Mapping) else None


def gateway_config_files(
    ctx: LintContext, pod: PodView, gateway: GatewayContainer
) -> Iterator[ConfigFile]:
    """The ConfigMap key the gateway reads as its config. When the path cannot be
    resolved here (a variable without a literal value, a relative path), every mounted
    ConfigMap file of the same name, or every one when the name is unknown too."""
    if gateway.config is None:
        return  # `podserve gateway` without --config refuses to start (cli/gateway.py)
    path = gateway.config
    working = gateway.spec.get("workingDir")
    if not path.startswith("/") and isinstance(working, str) and working.startswith("/"):
        path = posixpath.join(working, path)
    exact = "$" not in path and path.startswith("/")
    path = posixpath.normpath(path)
    name = posixpath.basename(path)
    for mounted, doc, key in _mounted_files(ctx, pod, gateway.spec):
        guessed = "$" in name or posixpath.basename(mounted) == name
        if not (mounted == path if exact else guessed):
            continue
        body = _parsed((doc.manifest.get("data") or {}).get(key))
        if body is not None:
            yield ConfigFile(doc, key, body)
