"""``ssl.principal.mapping.rules`` (``controller/security/principal_rules.py`` M1-M5)."""

from __future__ import annotations

import pytest

from controller.security.principal_rules import PrincipalMapper, PrincipalMappingError, parse_rules

DN = "CN=Alice,OU=ServiceUsers,O=Acme,L=Paris,ST=IDF,C=FR"


def test_m1_m5_default() -> None:
    assert PrincipalMapper().principal_name(DN) == DN
    assert PrincipalMapper.from_config("").principal_name(DN) == DN
    assert PrincipalMapper.from_config(" DEFAULT ").principal_name(DN) == DN


def test_m2_kafka_documentation_examples() -> None:
    rules = (
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    mapper = PrincipalMapper.from_config(rules)
    assert mapper.principal_name(DN) == "Alice"
    assert mapper.principal_name("CN=Bob,OU=Admins,O=Acme,L=Paris,ST=IDF,C=FR") == "bob@admins"
    assert mapper.principal_name("O=Acme,cn=Carol.X,C=FR") == "carol.x"
    assert mapper.principal_name("O=NoName") == "O=NoName"


def test_m2_upper_case_and_literal_dollar_beyond_groups() -> None:
    assert PrincipalMapper.from_config("RULE:^CN=([^,]*).*$/$1/U").principal_name(DN) == "ALICE"
    assert PrincipalMapper.from_config("RULE:^CN=([^,]*).*$/$1-$2/").principal_name(DN) == "Alice-$2"
    assert PrincipalMapper.from_config("RULE:^CN=(A)(l)([^,]*).*$/$3$2$1/").principal_name(DN) == "icelA"


def test_m2_the_pattern_must_match_the_whole_dn() -> None:
    mapper = PrincipalMapper.from_config("RULE:CN=Alice/x/,DEFAULT")
    assert mapper.principal_name(DN) == DN
    assert mapper.principal_name("CN=Alice") == "x"


def test_m3_escaped_slashes_and_commas() -> None:
    mapper = PrincipalMapper.from_config(r"RULE:^CN=(.*?)\/(.*?),.*$/$2\/$1/ , DEFAULT")
    assert mapper.principal_name("CN=a/b,O=x") == "b/a"
    assert len(parse_rules(r"RULE:^CN=(.*?),O=x$/$1/L, DEFAULT")) == 2


def test_m4_no_rule_applies_and_malformed_rules() -> None:
    with pytest.raises(PrincipalMappingError):
        PrincipalMapper.from_config("RULE:^CN=(.*)$/$1/").principal_name("O=Acme")
    for bad in ("RULE:^CN=(.*)$/$1", "RULE:abc", "NOPE", "RULE:^CN=(.*$/$1/", "DEFAULT DEFAULT", "RULE:a/b/X"):
        with pytest.raises(PrincipalMappingError):
            parse_rules(bad)
