"""Loads an established hub's jupyterhub_config.py the way JupyterHub 6.1 does (traitlets' PyFileConfigLoader) and
writes what it set as JSON, for `hub import-config` (cli/import-config.ts), which maps it to this hub's config.

Usage: python import-config.py CONFIG_FILE RESULT_JSON

Loading the file runs it (as JupyterHub does); nothing else of the operator's runs. No spawner, authenticator or
proxy class is instantiated, and the companion packages (oauthenticator, dockerspawner, ...) are never imported:
their modules are placeholders whose classes only carry their names, so `from oauthenticator.generic import
GenericOAuthenticator` works whether or not the package is installed. The Kubernetes clients' models
(`kubernetes_asyncio.client.V1Container(name=..., security_context=...)`, as zero-to-jupyterhub's config builds its
init container) keep the fields they are given and are written as Kubernetes' own JSON (camelCase); pycurl is a
placeholder too, so the chart's `AsyncHTTPClient.configure("tornado.curl_httpclient.CurlAsyncHTTPClient")` loads.
Python values that JSON has no word for (functions, classes, bytes) are written as tagged objects
{"__hub_import__": kind, ...}; the lines each option was assigned on are found by reading the file's syntax tree,
since traitlets keeps no lines.
"""

import ast
import importlib.abc
import importlib.machinery
import inspect
import json
import math
import os
import sys
import traceback
import types

TAG = "__hub_import__"

# Packages whose classes a config names but whose code the importer never runs.
COMPANIONS = {
    "oauthenticator", "ldapauthenticator", "dockerspawner", "kubespawner", "batchspawner", "wrapspawner",
    "sudospawner", "systemdspawner", "nativeauthenticator", "firstuseauthenticator", "jupyterhub_traefik_proxy",
    "jupyterhub_ltiauthenticator", "ltiauthenticator", "tmpauthenticator", "dummyauthenticator",
    "kubernetes", "kubernetes_asyncio", "pycurl",
}
# Packages whose submodules are named as attributes (`from kubernetes_asyncio import client`) and whose classes are
# Kubernetes object models built with keyword arguments.
KUBERNETES_CLIENTS = {"kubernetes", "kubernetes_asyncio"}
# The few fields the clients do not name by plain camelCase (their models' attribute_map)
K8S_FIELD_NAMES = {
    "host_ip": "hostIP", "host_ips": "hostIPs", "pod_ip": "podIP", "pod_ips": "podIPs", "host_pid": "hostPID",
    "host_ipc": "hostIPC", "cluster_ip": "clusterIP", "cluster_ips": "clusterIPs", "external_ips": "externalIPs",
    "load_balancer_ip": "loadBalancerIP", "_ref": "$ref", "_schema": "$schema",
}


def k8s_field(name):
    if name in K8S_FIELD_NAMES:
        return K8S_FIELD_NAMES[name]
    head, *rest = name.lstrip("_").split("_")  # `_exec`, `_from`: Python keywords
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def model_class(module, name):
    """A Kubernetes client model: it keeps the fields it is built with (None means unset, as in the clients)."""

    def __init__(self, **fields):
        self.__dict__["_fields"] = {k: v for k, v in fields.items() if v is not None}

    def __setattr__(self, key, value):
        self._fields[key] = value

    def __getattr__(self, key):
        if key.startswith("__"):
            raise AttributeError(key)
        return self._fields.get(key)

    return type(name, (), {"__module__": module, "__qualname__": name, TAG: "k8s-model", "__init__": __init__,
                           "__setattr__": __setattr__, "__getattr__": __getattr__})


class CompanionCall(Exception):
    pass


def placeholder_function(module, name):
    def call(*args, **kwargs):
        raise CompanionCall(f"the config calls {module}.{name}, code of a companion package the importer does not run")

    call.__module__ = module
    call.__qualname__ = name
    return call


class PlaceholderModule(types.ModuleType):
    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []  # a package: its submodules come from the same finder
        self._members = {}

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr not in self._members and self.__name__.split(".")[0] in KUBERNETES_CLIENTS:
            self._members[attr] = (
                model_class(self.__name__, attr) if attr[:1].isupper() else importlib.import_module(f"{self.__name__}.{attr}")
            )
        if attr not in self._members:
            self._members[attr] = (
                type(attr, (), {"__module__": self.__name__, "__qualname__": attr, TAG: "placeholder"})
                if attr[:1].isupper() else placeholder_function(self.__name__, attr)
            )
        return self._members[attr]


class PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in COMPANIONS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return PlaceholderModule(spec.name)

    def exec_module(self, module):
        pass


def assignment_lines(tree):
    """{"Section.option": [line, ...]} for every `c.Section.option = ...`, `c.Section.option[k] = ...`,
    `c.Section.option += ...` and `c.Section.option.update(...)`/`.append(...)` in the file, in source order."""
    names = {"c"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "get_config":
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def key(node):
        chain = []
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Attribute):
                chain.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in names and len(chain) >= 2:
            chain.reverse()
            return f"{chain[0]}.{chain[1]}"
        return None

    lines = {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            targets = [node.func.value]
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                k = key(t)
                if k:
                    lines.setdefault(k, []).append(node.lineno)
    return {k: sorted(set(v)) for k, v in lines.items()}


def where(obj):
    """The file and first line of a function's or class's definition, when Python knows them."""
    target = getattr(obj, "__func__", obj)
    if hasattr(target, "func") and callable(target.func):  # functools.partial
        target = target.func
    code = getattr(target, "__code__", None)
    if code is not None:
        return {"file": code.co_filename, "line": code.co_firstlineno}
    try:
        return {"file": inspect.getsourcefile(target), "line": inspect.getsourcelines(target)[1]}
    except (TypeError, OSError):
        return None


# class name -> the line of its `class` statement in the config file
CLASS_LINES = {}


def qualified(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def describe_class(cls, config_file):
    info = {
        TAG: "class",
        "name": qualified(cls),
        "mro": [qualified(k) for k in cls.__mro__ if k is not object],
        "placeholder": bool(cls.__dict__.get(TAG)),
    }
    # a class written in the config file: its own methods and attributes are the operator's code
    defined = None
    own = []
    for name, member in vars(cls).items():
        inner = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
        inner = inner.fget if isinstance(inner, property) else inner
        at = where(inner) if callable(inner) else None
        if at and os.path.abspath(at["file"]) == config_file:
            own.append({"name": name, "line": at["line"]})
            defined = defined or at
    if own:
        info["members"] = sorted(own, key=lambda m: m["line"])
        line = CLASS_LINES.get(cls.__qualname__)
        info["defined"] = {"file": config_file, "line": line} if line else defined
    return info


def encode(value, config_file, depth=0):
    if depth > 50:
        return {TAG: "python", "repr": "(nested too deeply)"}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)  # IntEnum (ssl.CERT_REQUIRED) as its number
    if isinstance(value, float):
        return value if math.isfinite(value) else {TAG: "python", "repr": repr(value)}
    if isinstance(value, (bytes, bytearray)):
        return {TAG: "bytes", "hex": bytes(value).hex()}
    if isinstance(value, type):
        return describe_class(value, config_file)
    if getattr(type(value), TAG, None) == "k8s-model":
        return {k8s_field(k): encode(v, config_file, depth + 1) for k, v in value._fields.items()}
    if isinstance(value, dict):
        return {str(k): encode(v, config_file, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v, config_file, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return [encode(v, config_file, depth + 1) for v in sorted(value, key=repr)]
    if callable(value):
        name = getattr(value, "__qualname__", None) or getattr(getattr(value, "func", None), "__qualname__", None) or type(value).__qualname__
        return {TAG: "callable", "name": name, "defined": where(value) or where(type(value))}
    return {TAG: "python", "repr": repr(value)[:200]}


def resolve(value):
    """A LazyConfigValue (`c.X.y.append(...)` on an option the file never assigned) as the list or dict it builds."""
    from traitlets.config.loader import LazyConfigValue

    if not isinstance(value, LazyConfigValue):
        return value
    if value._update is not None and not (value._extend or value._prepend or value._inserts):
        return value.get_value({})
    return value.get_value([])


def failure(kind, message, line=None):
    return {"ok": False, "kind": kind, "message": message, "line": line}


def load(config_file):
    if not os.path.isfile(config_file):
        return failure("missing", "no such file")
    with open(config_file, "rb") as f:
        source = f.read()
    try:
        tree = ast.parse(source, config_file)
    except SyntaxError as e:
        return failure("syntax", f"Python syntax error: {e.msg}", e.lineno)
    CLASS_LINES.update({n.name: n.lineno for n in ast.walk(tree) if isinstance(n, ast.ClassDef)})
    from traitlets.config.loader import PyFileConfigLoader
    import jupyterhub
    import traitlets

    sys.meta_path.insert(0, PlaceholderFinder())
    loader = PyFileConfigLoader(os.path.basename(config_file), path=os.path.dirname(config_file))
    try:
        config = loader.load_config()
    except BaseException as e:  # noqa: B036 - a config may call sys.exit(); it is reported, not obeyed
        frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == config_file]
        line = frames[-1].lineno if frames else None
        return failure("raised", f"loading the file raised {type(e).__name__}: {e}".rstrip(": "), line)
    sections = {}
    for section, options in config.items():
        if not hasattr(options, "items"):
            sections.setdefault("", {})[section] = encode(options, config_file)  # `c.foo = 1`: not an option
            continue
        sections[section] = {name: encode(resolve(value), config_file) for name, value in options.items()}
    return {
        "ok": True,
        "file": config_file,
        "jupyterhub": jupyterhub.__version__,
        "traitlets": traitlets.__version__,
        "sections": sections,
        "lines": assignment_lines(tree),
    }


def main():
    config_file, result_file = os.path.abspath(sys.argv[1]), sys.argv[2]
    # as `jupyterhub -f FILE` run from the file's folder: relative paths the file opens resolve there
    if os.path.isdir(os.path.dirname(config_file)):
        os.chdir(os.path.dirname(config_file))
    result = load(config_file)
    with open(result_file, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
