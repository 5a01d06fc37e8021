"""Virtual platform templates: YAML and Merkat's XML (Fig. 5) into one validated model."""

from __future__ import annotations

import pytest

from merkat.service.templates import TemplateError, parse

GOOD = """\
name: saturne
controller:
  policy: vertical-deadline
  reference: 10800
  params: {t_diff: 0.1}
budget: 80000
renewal: 80000
keep_idle: 600
poll: 60
clusters:
  - name: saturne-1
    command: ./worker
    count: 2
  - name: saturne-0
    command: mpirun ./solver
    depends: saturne-1
    controller: true
    process: true
    cpu: 2
    memory: 512
    min_memory: 128
    monitor: {kind: log, regex: 'it (?P<work_done>\\d+)/(?P<work_total>\\d+)'}
"""

XML = """\
<platform>
  <name>CodeSaturne</name>
  <controller>vertical-deadline</controller>
  <keepidle>600</keepidle>
  <budget>80000</budget>
  <renew>80000</renew>
  <group name="saturne-0" poll="yes" controller="yes" process="mpirun" depends="saturne-1">
    <command>mpirun ./solver</command>
    <cpu>2</cpu>
    <monitor kind="log" regex="it (?P&lt;work_done&gt;\\d+)"/>
  </group>
  <group name="saturne-1" controller="no">
    <command>./worker</command>
    <count>2</count>
  </group>
  <policy>
    <type>deadline</type>
    <reference>10800</reference>
    <params><t_diff>0.1</t_diff></params>
  </policy>
  <poll>60</poll>
</platform>
"""


def test_yaml_template_parses_with_its_derived_views() -> None:
    t = parse(GOOD)
    assert t.name == "saturne" and t.controller.reference == 10800
    assert t.controller.params == {"t_diff": 0.1}
    assert [c.name for c in t.ordered()] == ["saturne-1", "saturne-0"]  # masters first
    assert t.controlled.name == "saturne-0" and t.monitored.name == "saturne-0"
    assert t.size == 3
    assert t.cluster_of(0)[0].name == "saturne-1" and t.cluster_of(2)[0].name == "saturne-0"
    assert t.cluster_of(5) == (t.clusters[1], 3)  # extra VMs join the last cluster


def test_xml_template_of_fig5_parses_into_the_same_model() -> None:
    t = parse(XML)
    assert t.name == "CodeSaturne"
    assert t.controller.policy == "vertical-deadline" and t.controller.reference == 10800
    assert t.controller.params == {"t_diff": 0.1}
    assert t.budget == 80000 and t.renewal == 80000 and t.keep_idle == 600 and t.poll == 60
    assert t.controlled.name == "saturne-0" and t.monitored.name == "saturne-0"
    assert t.clusters[1].count == 2


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace("budget: 80000", "budget: -1"), "line 6: budget: Input should be greater"),
    (GOOD.replace("cpu: 2", "cpu: 0"), "line 19: clusters.1.cpu: Input should be greater than 0"),
    (GOOD.replace("depends: saturne-1", "depends: nope"), "depends on unknown cluster 'nope'"),
    (GOOD.replace("(?P<work_done>", "(?P<speed>"), "clusters.1.monitor.regex: unknown metric"),
    (GOOD.replace("(?P<work_done>", "(?P<work_done"),
     "clusters.1.monitor.regex: not a regular expression the linear-time engine (RE2) runs"),
    # RE2 runs in linear time: backreferences and lookaround are refused at submit (issue 25)
    (GOOD.replace("(?P<work_done>\\d+)", "(?P<work_done>\\d+)\\1"),
     "clusters.1.monitor.regex: not a regular expression the linear-time engine (RE2) runs: "
     "invalid escape sequence"),
    (GOOD.replace("(?P<work_done>", "(?=x)(?P<work_done>"),
     "clusters.1.monitor.regex: not a regular expression the linear-time engine (RE2) runs: "
     "invalid perl operator: (?="),
    (GOOD.replace("poll: 60", "poll: 0.5"), "poll: Input should be greater than or equal to 1"),
    (GOOD.replace("name: saturne\n", "name: 'bad name'\n"), "line 1: name: String should match"),
    (GOOD.replace("poll: 60", "pol: 60"), "line 9: pol: unknown key (did you mean 'poll'?)"),
    # a misspelt required key is named, not the key it leaves missing (issue 26)
    (GOOD.replace("  policy: vertical", "  polcy: vertical"),
     "line 3: controller.polcy: unknown key (did you mean 'policy'?)"),
    (GOOD.replace("min_memory: 128", "min_memroy: 128"),
     "clusters.1.min_memroy: unknown key (did you mean 'min_memory'?)"),
    (GOOD.replace("kind: log,", "knd: log,"), "clusters.1.monitor.knd: unknown key"),
    (GOOD.replace("keep_idle: 600", "zzz: 600"), "zzz: unknown key (known: name, controller"),
    # a number finer than the bank's micro-credit was admitted rounded: budget 1e-07 → 0
    (GOOD.replace("budget: 80000", "budget: 0.0000001"),
     "line 6: budget: at most 6 decimals (1 micro-credit): 1e-07"),
    (GOOD.replace("renewal: 80000", "renewal: 2.1234567"), "renewal: at most 6 decimals"),
    ("name: [unclosed\n", "template line 2"),
    ("- a list\n", "expected a mapping"),
])
def test_bad_yaml_templates_name_the_field_and_line(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=None) as info:
        parse(text)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize(("text", "message"), [
    (XML.replace("</platform>", ""), "not valid XML"),
    (XML.replace("<budget>80000</budget>", "<budget>-5</budget>"), "budget: must not be negative"),
    (XML.replace("<budget>80000</budget>", "<budget>8_0</budget>"), "budget: not a decimal"),
    (XML.replace("<poll>60</poll>", "<color>red</color>"), "unknown element <color>"),
    ("<cluster/>", "root element must be <platform>"),
    # nothing is ignored silently (an unknown attribute or child was dropped, an element
    # given twice kept its last value)
    (XML.replace('controller="no"', 'controler="no"'),
     "clusters.1.controler: unknown key (did you mean 'controller'?)"),
    (XML.replace("<type>deadline</type>", "<refrence>5</refrence>"),
     "controller.refrence: unknown key (did you mean 'reference'?)"),
    (XML.replace("<cpu>2</cpu>", "<cpu>2</cpu><bid><cpu>x</cpu></bid>"),
     "clusters.0.bid.cpu: Input should be a valid number"),
    (XML.replace("<cpu>2</cpu>", "<cpu>2</cpu><bid><cpux>1</cpux></bid>"),
     "clusters.0.bid.cpux: unknown key (did you mean 'cpu'?)"),
    (XML.replace("<cpu>2</cpu>", "<cpu>2</cpu><cpu>64</cpu>"),
     "<cpu> given twice in <group name='saturne-0'>"),
    (XML.replace("<budget>80000</budget>", "<budget>80000</budget><budget>1</budget>"),
     "<budget> given twice in <platform>"),
])
def test_bad_xml_templates_are_refused(text: str, message: str) -> None:
    with pytest.raises(TemplateError) as info:
        parse(text)
    assert message in str(info.value), str(info.value)


def test_xml_bid_and_monitor_take_their_fields_as_children_too() -> None:
    t = parse(XML.replace("<cpu>2</cpu>", "<cpu>2</cpu><bid><cpu>0.5</cpu></bid>"))
    assert t.clusters[0].bid is not None and t.clusters[0].bid.cpu == 0.5
