"""Merkat's XML templates (Merkat Fig. 5) read into the mapping the YAML form gives, which
:func:`merkat.service.templates.validate` then checks like any other template."""

from __future__ import annotations

from typing import Any

from merkat.service.template_errors import TemplateError


def from_xml(text: str, source: str) -> dict[str, Any]:
    """Merkat's XML (Fig. 5) as the YAML model's mapping: ``<controller>`` names the policy
    (``<policy><type>`` when there is no ``<controller>``), ``<reference>`` the deadline,
    ``<params>`` children the parameters, ``<renew>`` the renewal, ``<keepidle>``, ``<poll>``,
    and each ``<group>`` (attributes name, depends, controller, process, poll) a cluster whose
    children (command, count, cpu, memory, min_memory, bid cpu=/memory=, monitor kind=/regex=;
    bid and monitor take their fields as children too) are the cluster's fields. Nothing is
    ignored: an unknown attribute or child is an unknown key, named with the closest known
    one, and an element given twice is refused (the last one would win, silently)."""
    import xml.etree.ElementTree as ET

    if "<!DOCTYPE" in text:  # the only place entities are declared: none, no expansion
        raise TemplateError(f"{source}: a DOCTYPE (entity declarations) is not allowed")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line = exc.position[0] if exc.position else None
        raise TemplateError(f"{source}{f' line {line}' if line else ''}: not valid XML") from None
    if root.tag != "platform":
        raise TemplateError(f"{source}: the root element must be <platform>, not <{root.tag}>")
    out: dict[str, Any] = {}

    def text_of(el: Any) -> str:
        return (el.text or "").strip()

    policy = root.find("policy")
    seen: set[str] = set()
    for el in root:
        tag = el.tag
        if tag != "group" and tag in seen:  # the last one would win, silently
            raise TemplateError(f"{source}: <{tag}> given twice in <platform>")
        seen.add(tag)
        if tag == "name":
            out["name"] = text_of(el)
        elif tag == "budget":
            out["budget"] = text_of(el)
        elif tag == "renew":
            out["renewal"] = text_of(el)
        elif tag == "keepidle":
            out["keep_idle"] = text_of(el)
        elif tag == "poll":
            out["poll"] = text_of(el)
        elif tag == "health":
            out["health"] = {**el.attrib, **{c.tag: text_of(c) for c in el}}
        elif tag in ("controller", "policy", "group"):
            continue
        else:
            raise TemplateError(f"{source}: unknown element <{tag}> in <platform>")
    ctl: dict[str, Any] = {}
    c = root.find("controller")
    if c is not None:
        ctl["policy"] = text_of(c)
    if policy is not None:
        t = policy.find("type")
        if "policy" not in ctl and t is not None:
            ctl["policy"] = text_of(t)
        ref = policy.find("reference")
        if ref is not None:
            ctl["reference"] = text_of(ref)
        params = policy.find("params")
        if params is not None:
            ctl["params"] = {p.tag: _number(text_of(p)) for p in params}
        for el in policy:  # anything else is an unknown key the model names
            if el.tag not in ("type", "reference", "params"):
                ctl[el.tag] = text_of(el)
    out["controller"] = ctl
    clusters = []
    for g in root.findall("group"):
        # name, depends; an unknown attribute (procss=) is an unknown key the model names
        cl: dict[str, Any] = {k: v for k, v in g.attrib.items()
                              if k not in ("controller", "process", "poll")}
        for flag in ("controller", "process"):
            v = g.attrib.get(flag)
            if v is not None:
                cl[flag] = v.lower() in ("yes", "true", "1") if flag == "controller" else True
        poll = g.attrib.get("poll")
        if poll is not None:  # Fig. 5: poll='yes' (read at <poll>), 'no' (never), or seconds
            low = poll.strip().lower()
            if low in ("no", "false", "0"):
                cl["poll"] = 0
            elif low not in ("yes", "true"):
                cl["poll"] = poll
        for child in g:
            if child.tag in ("files_in", "files_out"):
                cl.setdefault(child.tag, []).append(text_of(child))
                continue
            if child.tag in cl:  # the last one would win, silently
                raise TemplateError(f"{source}: <{child.tag}> given twice in <group "
                                    f"name={g.attrib.get('name', '')!r}>")
            if child.tag in ("bid", "monitor"):  # attributes, or children (<cpu>2</cpu>)
                cl[child.tag] = {**child.attrib, **{c.tag: text_of(c) for c in child}}
            else:
                cl[child.tag] = text_of(child)
        clusters.append(cl)
    out["clusters"] = clusters
    return out


def _number(s: str) -> Any:
    """A parameter's text as a YAML value would be: an int, a float, ``true``/``false``
    (a boolean: the text ``false`` is not a policy's false), else the text."""
    if s.strip().lower() in ("true", "false"):
        return s.strip().lower() == "true"
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s
