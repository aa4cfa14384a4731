"""The option table: every option declared once, unknown and Kafka names refused clearly,
aliases, types and defaults; redaction of credentials; the pyspark lower bound."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from chute.spark.options import (
    DEFAULT_URL,
    NOT_YET,
    OPTIONS,
    ChuteOptions,
    OptionError,
    Side,
    known_names,
    redact_passcode,
    with_passcode,
)
from chute.spark.version import MIN_PYSPARK, require_pyspark, version_tuple

ROOT = Path(__file__).resolve().parents[3]
SPARK_DEFAULT_REDACTION = "(?i)secret|password|token|access[.]?key"  # spark.redaction.regex


def read(**options: str) -> ChuteOptions:
    return ChuteOptions.parse({"destination": "q", **options}, Side.READ)


def write(**options: str) -> ChuteOptions:
    return ChuteOptions.parse(options, Side.WRITE)


def test_each_name_is_declared_once_and_sets_one_field() -> None:
    keys = [k.lower() for o in OPTIONS for k in (o.name, *o.aliases)]
    assert len(keys) == len(set(keys))
    fields = {f.name for f in dataclasses.fields(ChuteOptions)} - {"given"}
    attrs = [o.attr for o in OPTIONS if o.attr is not None]
    assert sorted(attrs) == sorted(fields)
    assert not set(keys) & set(NOT_YET)


def test_absent_options_take_the_declared_defaults() -> None:
    parsed = read()
    for option in OPTIONS:
        if option.attr is not None and option.name != "destination":
            assert getattr(parsed, option.attr) == option.default, option.name
    assert (parsed.url, parsed.cursor, parsed.timeout_ms, parsed.partitions) == (
        DEFAULT_URL,
        None,  # no shared default: a stream read must name its cursor
        30_000,
        2,
    )
    assert parsed.given == frozenset({"destination"})


def test_values_get_their_types() -> None:
    parsed = read(
        tlsVerify="FALSE", timeoutMs="1500", numPartitions="0", leaseMs="5000", selector="n > 2"
    )
    assert parsed.tls_verify is False
    assert (parsed.timeout_ms, parsed.partitions, parsed.lease_ms) == (1500, 1, 5000)
    assert parsed.selector == "n > 2"
    with pytest.raises(OptionError, match="tlsVerify must be true or false, not 'maybe'"):
        read(tlsVerify="maybe")
    with pytest.raises(OptionError, match="timeoutMs must be an integer"):
        read(timeoutMs="30s")


def test_keys_are_case_insensitive_as_spark_lower_cases_them() -> None:
    parsed = read(maxmessagespertrigger="7", STARTINGOFFSETS="Latest", tlscafile="ca.pem")
    assert (parsed.max_per_trigger, parsed.starting, parsed.tls_ca) == (7, "latest", "ca.pem")


@pytest.mark.parametrize(
    ("key", "suggested"),
    [
        ("uri", "url"),
        ("destinaton", "destination"),
        ("pasword", "password"),
        ("maxmesagespertrigger", "maxMessagesPerTrigger"),
        ("numPartition", "numPartitions"),
        ("startingoffest", "startingOffsets"),
    ],
)
def test_a_misspelt_option_is_refused_with_the_closest_name(key: str, suggested: str) -> None:
    with pytest.raises(OptionError) as info:
        read(**{key: "x"})
    message = str(info.value)
    assert f"unknown option '{key}' for a chute read (did you mean '{suggested}'?)" in message
    assert all(name in message for name in known_names(Side.READ))


def test_an_unknown_option_without_a_close_name_lists_the_known_ones() -> None:
    with pytest.raises(OptionError) as info:
        write(compression="zstd")
    message = str(info.value)
    assert "did you mean" not in message
    assert message.endswith("the options of a write are: " + ", ".join(known_names(Side.WRITE)))
    assert "cursor" not in known_names(Side.WRITE)


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("kafka.bootstrap.servers", "connect with url, login, password"),
        ("kafka.group.id", "chute is not Kafka"),
        ("assign", "option destination"),
        ("endingTimestamp", "use endingOffsets"),
        ("startingOffsetsByTimestamp", "use startingTimestamp"),
    ],
)
def test_kafka_names_chute_lacks_are_refused_as_not_supported_yet(key: str, hint: str) -> None:
    with pytest.raises(
        OptionError, match="of Spark's Kafka connector is not supported by chute yet"
    ):
        read(**{key: "x"})
    with pytest.raises(OptionError, match=re.escape(hint)):
        read(**{key.lower(): "x"})


def test_kafka_names_with_a_chute_equivalent_are_aliases() -> None:
    parsed = read(maxOffsetsPerTrigger="100", startingOffsets="earliest")
    assert (parsed.max_per_trigger, parsed.starting) == (100, "earliest")
    assert "maxMessagesPerTrigger" in parsed.given
    parsed = ChuteOptions.parse(
        {"subscribe": "stream:a, stream:b", "minPartitions": "4", "failOnDataLoss": "false"},
        Side.READ,
    )
    assert parsed.destinations == ("stream:a", "stream:b")
    assert (parsed.partitions, parsed.fail_on_loss, parsed.streams) == (4, False, True)
    parsed = ChuteOptions.parse({"subscribePattern": "stream:orders.*"}, Side.READ)
    assert (parsed.pattern, parsed.destinations, parsed.streams) == ("stream:orders.*", (), True)


def test_stream_offsets_take_kafkas_json_form_and_a_timestamp() -> None:
    parsed = read(startingOffsets='{"stream:a": 5, "stream:b": -2}', startingTimestamp="1700")
    assert parsed.starting == '{"stream:a": 5, "stream:b": -2}'
    assert parsed.starting_timestamp == 1700
    assert read().fail_on_loss is True
    with pytest.raises(OptionError, match="earliest, latest, an offset or JSON"):
        read(startingOffsets="yesterday")
    with pytest.raises(OptionError, match="a pattern names streams"):
        read(pattern="queue:x*")


def test_several_destinations_are_for_streams_and_reads_only() -> None:
    with pytest.raises(OptionError, match="only a read of streams takes several"):
        _ = write(destination="queue:a,queue:b").destination


@pytest.mark.parametrize(
    ("options", "attr", "value"),
    [
        ({"passcode": "pw"}, "password", "pw"),
        ({"user": "u"}, "login", "u"),
        ({"dest": "topic:t"}, "destination", "topic:t"),
        ({"address": "q2"}, "destination", "queue:q2"),
        ({"subscription": "s"}, "cursor", "s"),
        ({"cursorName": "s"}, "cursor", "s"),
        ({"startingOffset": "12"}, "starting", "12"),
        ({"tls.certFile": "c.pem"}, "tls_cert", "c.pem"),
        ({"tls.keyFile": "k.pem"}, "tls_key", "k.pem"),
    ],
)
def test_aliases_set_the_same_field(options: dict[str, str], attr: str, value: str) -> None:
    parsed = ChuteOptions.parse(
        {"destination": "q"} | options if "destination" not in attr else options
    )
    assert getattr(parsed, attr) == value


def test_an_option_given_under_two_names_is_refused() -> None:
    with pytest.raises(OptionError, match="'password' and 'passcode' both set password"):
        ChuteOptions.parse({"destination": "q", "password": "a", "passcode": "b"})


def test_options_of_the_other_side_are_refused() -> None:
    with pytest.raises(OptionError, match=r"'cursor' applies to reads .* remove it from the write"):
        write(cursor="c")
    with pytest.raises(OptionError, match="'checkpointLocation' applies to writes"):
        read(checkpointLocation="ck")
    assert write(checkpointlocation="/ck", queryname="q").destination is None  # Spark's own
    with pytest.raises(OptionError, match="takes no path"):
        read(path="queue:q")


def test_reads_need_a_destination_writes_do_not() -> None:
    with pytest.raises(OptionError, match=r"destination.*required"):
        ChuteOptions.parse({"url": DEFAULT_URL}, Side.READ)
    assert write(url=DEFAULT_URL).destination is None


def test_the_password_never_shows_in_a_repr() -> None:
    parsed = ChuteOptions.parse({"destination": "q", "password": "hunter2", "login": "alice"})
    assert "hunter2" not in repr(parsed)
    assert "alice" in repr(parsed)


def test_password_is_a_key_sparks_default_redaction_hides_and_passcode_is_added() -> None:
    assert re.search(SPARK_DEFAULT_REDACTION, "password", re.IGNORECASE)
    assert not re.search(SPARK_DEFAULT_REDACTION, "passcode", re.IGNORECASE)
    assert with_passcode("(?i)url") == "(?i)url|(?i)passcode"
    assert with_passcode("(?i)url|passcode") == "(?i)url|passcode"
    assert with_passcode(None) == "(?i)url|(?i)passcode"


class FakeConf:
    def __init__(self, value: str) -> None:
        self.values = {"spark.sql.redaction.options.regex": value}
        self.sets = 0

    def get(self, key: str) -> str:
        return self.values[key]

    def set(self, key: str, value: str) -> None:
        self.values[key] = value
        self.sets += 1


def test_redact_passcode_extends_the_sessions_regex_once() -> None:
    class Session:
        conf = FakeConf("(?i)url")

    spark: Any = Session()
    redact_passcode(spark)
    redact_passcode(spark)
    assert spark.conf.values["spark.sql.redaction.options.regex"] == "(?i)url|(?i)passcode"
    assert spark.conf.sets == 1


def test_the_docs_describe_every_option_and_kafka_name() -> None:
    docs = (ROOT / "docs" / "spark.md").read_text()
    for option in OPTIONS:
        for key in (option.name, *option.aliases):
            assert f"`{key}`" in docs, key
    for key in ("failOnDataLoss", "minPartitions", "kafka.*", "maxOffsetsPerTrigger", "subscribe"):
        assert f"`{key}`" in docs, key


def _lower_bound(requirement: str) -> tuple[int, int]:
    match = re.fullmatch(r"pyspark>=([0-9.]+)", requirement.replace(" ", ""))
    assert match, f"pyspark must be a lower bound, not {requirement!r}"
    return version_tuple(match.group(1))


def test_pyspark_is_a_lower_bound_the_installed_one_meets() -> None:
    import pyspark

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    bounds = {
        extra: _lower_bound(next(r for r in extras[extra] if r.startswith("pyspark")))
        for extra in ("spark", "test")
    }
    assert bounds == {"spark": MIN_PYSPARK, "test": MIN_PYSPARK}
    assert version_tuple(pyspark.__version__) >= MIN_PYSPARK
    require_pyspark()  # the installed one passes the import-time check


@pytest.mark.parametrize("version", ["4.1.1", "4.0.0", "3.5.3", "4.1.0.dev0"])
def test_an_older_pyspark_is_refused_saying_what_to_install(version: str) -> None:
    with pytest.raises(ImportError, match=rf"needs pyspark>=4\.2 .*pyspark {re.escape(version)}"):
        require_pyspark(version)


@pytest.mark.parametrize("version", ["4.2.0", "4.3.0", "4.10.1", "5.0.0.dev1"])
def test_a_new_enough_pyspark_passes(version: str) -> None:
    require_pyspark(version)
