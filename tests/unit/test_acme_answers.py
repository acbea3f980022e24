"""
The tokens the leader publishes, as every node reads them (ingress/acme/answers.py): what the ConfigMap
holds, what is left out, and the snapshot rewritten into the challenge routes of the routing table.
"""

from __future__ import annotations

from twisted.internet.testing import MemoryReactor

from ingress.acme.answers import CHALLENGES_NAME, ClusterAnswers, answers_data, parse_answers
from ingress.model import ClusterState, ConfigMap, ObjectMeta
from ingress.routing import build
from ingress.routing.acme_challenges import CHALLENGE_PATH, CHALLENGES
from ingress.routing.build_options import BuildOptions

TOKEN = "tok_EN-1"
ANSWER = TOKEN + ".thumbprint"


def published(namespace: str, data: dict[str, str]) -> ClusterState:
    return ClusterState(config_maps={(namespace, CHALLENGES_NAME): ConfigMap(ObjectMeta(namespace, CHALLENGES_NAME), tuple(data.items()))})


def test_what_the_leader_writes_every_node_reads_back() -> None:
    tokens = {TOKEN: ("site.example.com", ANSWER)}
    state = published("twingress", answers_data(tokens))
    assert parse_answers(state.config_maps[("twingress", CHALLENGES_NAME)]) == tokens


def test_malformed_entries_are_left_out() -> None:
    state = published("twingress", {
        "bad/token": "site.example.com bad/token.x",  # not base64url: never a route path
        "other": "site.example.com " + ANSWER,  # not this token's key authorization
        "nohost": "",
        TOKEN: "Site.Example.com " + ANSWER,
    })
    assert parse_answers(state.config_maps[("twingress", CHALLENGES_NAME)]) == {TOKEN: ("site.example.com", ANSWER)}
    assert parse_answers(None) == {}


def test_the_snapshot_routes_each_token_to_this_node_s_responder() -> None:
    answers = ClusterAnswers(MemoryReactor(), "twingress")  # type: ignore[arg-type]  # listenTCP is all it needs
    state = published("twingress", answers_data({TOKEN: ("site.example.com", ANSWER)}))
    assert answers.rewrite(state) is state  # not listening yet: no routes, but the answers are kept
    assert answers.resource.answers == {TOKEN: ANSWER}
    answers.startService()
    rewritten = answers.rewrite(state)
    data = dict(rewritten.config_maps[CHALLENGES].data)
    port = answers._port
    assert port is not None
    assert data.pop("responder") == f"{port.getHost().host}:{port.getHost().port}"  # type: ignore[attr-defined]  # a TCP port's address
    assert data == {TOKEN: "site.example.com"}
    table = build(rewritten, BuildOptions(acme_challenges=True)).table
    route = table.hosts["site.example.com"].exact[CHALLENGE_PATH + TOKEN]
    assert route.policies is None and not route.redirect_https
    assert answers.rewrite(published("twingress", {})).config_maps.get(CHALLENGES) is None  # withdrawn: the routes go
    assert answers.resource.answers == {}
    answers.stopService()


def test_another_namespace_s_configmap_is_not_read() -> None:
    answers = ClusterAnswers(MemoryReactor(), "twingress")  # type: ignore[arg-type]
    answers.startService()
    state = published("elsewhere", answers_data({TOKEN: ("site.example.com", ANSWER)}))
    assert answers.rewrite(state) is state and answers.resource.answers == {}
