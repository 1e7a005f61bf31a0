"""A ValidatingAdmissionPolicy and its binding applied to one request as the API server applies
them, with cel-python evaluating the CEL.

The request is an ``admission.k8s.io/v1`` AdmissionRequest as the API server builds it for CEL:
``request`` without the objects, which come as ``object`` (null on DELETE) and ``oldObject``
(null on CREATE). The order is the server's: the resource rules, then the match conditions (all
true, or the policy does not apply), then every validation; ``variables`` are evaluated in order,
and one that fails is an error only where a validation uses it (the server evaluates them
lazily). With ``failurePolicy: Fail``, an expression that fails denies. Only the fields the
evaluator implements are accepted: any other field of the policy or binding is an error, never
ignored.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import celpy

_POLICY_SPEC = {"failurePolicy", "matchConstraints", "matchConditions", "variables", "validations"}
_VALIDATION = {"expression", "message", "messageExpression"}
_RULE = {"apiGroups", "apiVersions", "operations", "resources"}
_BINDING_SPEC = {"policyName", "validationActions"}


@dataclasses.dataclass(frozen=True)
class Decision:
    allowed: bool
    messages: tuple[str, ...] = ()


def request(
    operation: str,
    username: str,
    extra: dict[str, list[str]] | None,
    name: str,
    *,
    group: str = "resource.k8s.io",
    version: str = "v1",
    resource: str = "resourceslices",
    kind: str = "ResourceSlice",
) -> dict[str, Any]:
    """The AdmissionRequest of a cluster-scoped object, as the server fills it (``extra`` is
    left out when empty, as its JSON form omits it)."""
    user: dict[str, Any] = {
        "username": username,
        "uid": str(uuid.uuid4()),
        "groups": ["system:authenticated"],
    }
    if extra:
        user["extra"] = extra
    options = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[operation]
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "uid": str(uuid.uuid4()),
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": name,
        "operation": operation,
        "userInfo": user,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options},
    }


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    """The expression's value, or a CELEvalError (returned or raised by cel-python)."""
    env = celpy.Environment()
    try:
        value = env.program(env.compile(expression)).evaluate(activation)
    except celpy.CELEvalError as exc:
        return exc
    return value


def _matches(rules: list[dict[str, Any]], req: dict[str, Any]) -> bool:
    for rule in rules:
        assert set(rule) <= _RULE, f"resourceRules: unsupported {sorted(set(rule) - _RULE)}"
        wanted = {
            "apiGroups": req["resource"]["group"],
            "apiVersions": req["resource"]["version"],
            "operations": req["operation"],
            "resources": req["resource"]["resource"],
        }
        if all(value in rule[key] or "*" in rule[key] for key, value in wanted.items()):
            return True
    return False


def decide(
    policy: dict[str, Any],
    binding: dict[str, Any],
    req: dict[str, Any],
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None,
) -> Decision:
    spec, bound = policy["spec"], binding["spec"]
    assert set(spec) <= _POLICY_SPEC, f"policy: unsupported {sorted(set(spec) - _POLICY_SPEC)}"
    assert set(bound) <= _BINDING_SPEC, f"binding: unsupported {sorted(set(bound) - _BINDING_SPEC)}"
    assert bound["policyName"] == policy["metadata"]["name"]
    assert bound["validationActions"] == ["Deny"], "only Deny is implemented"
    assert spec["failurePolicy"] == "Fail", "only Fail is implemented"
    if not _matches(spec["matchConstraints"]["resourceRules"], req):
        return Decision(True)
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(req),
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "params": celpy.json_to_cel(None),
        "namespaceObject": celpy.json_to_cel(None),  # cluster-scoped
    }
    for condition in spec.get("matchConditions", []):
        value = _evaluate(condition["expression"], activation)
        if isinstance(value, celpy.CELEvalError):
            return Decision(False, (f"match condition {condition['name']}: {value}",))
        if not value:
            return Decision(True)
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        value = _evaluate(
            variable["expression"], {**activation, "variables": celpy.celtypes.MapType(variables)}
        )
        if not isinstance(value, celpy.CELEvalError):
            variables[celpy.celtypes.StringType(variable["name"])] = value
    activation["variables"] = celpy.celtypes.MapType(variables)
    failures = []
    for validation in spec["validations"]:
        assert set(validation) <= _VALIDATION, (
            f"validation: unsupported {sorted(set(validation) - _VALIDATION)}"
        )
        value = _evaluate(validation["expression"], activation)
        if isinstance(value, celpy.CELEvalError):
            failures.append(f"expression {validation['expression']!r} failed: {value}")
        elif not isinstance(value, celpy.celtypes.BoolType):
            failures.append(f"expression {validation['expression']!r}: {type(value).__name__}, not a bool")
        elif not value:
            failures.append(_message(validation, activation))
    return Decision(not failures, tuple(failures))


def _message(validation: dict[str, Any], activation: dict[str, Any]) -> str:
    """messageExpression's string, else message, else the server's default."""
    if "messageExpression" in validation:
        value = _evaluate(validation["messageExpression"], activation)
        if isinstance(value, str) and value:
            return str(value)
    return str(validation.get("message") or f"failed expression: {validation['expression']}")
