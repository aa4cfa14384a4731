"""DropboxMQ filenames: one test per rule of notes/dropboxmq.md, both directions."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from chute.dropbox.escape import enc
from chute.dropbox.names import (
    DEFAULT_CLAIM_ROOM,
    MAX_CLIENT_ID_BYTES,
    NAME_MAX_BYTES,
    claim_name,
    claim_room,
)
from chute.dropbox.properties import is_java_identifier, lost_properties
from chute.dropbox.transcoder import (
    DecodedName,
    decode_filename,
    dropbox_id,
    encode_filename,
)
from chute.errors import InvalidMessage
from chute.message import (
    BodyKind,
    Byte,
    Float,
    Int,
    Message,
    PropertyValue,
    Short,
    property_type,
)

NOW = 1_700_000_000_000
SEED_EXAMPLE_1 = (
    "4.1140429201295000-9262574723.T.1140429211295.corr1283.TestQueue1.XYZType.prop1S=hello"
)
SEED_EXAMPLE_2 = "4.1140429201295000-9262574723.T"


def dec(name: str) -> DecodedName:
    return decode_filename(name, now_ms=NOW)


def props(name: str) -> dict[str, PropertyValue]:
    return dec("4.1.T....." + name).properties


def typed(properties: dict[str, PropertyValue]) -> dict[str, tuple[str, PropertyValue]]:
    """Properties with their JMS type, so Int(1) and 1 compare different."""
    return {k: (property_type(v).name, v) for k, v in properties.items()}


def msg(**fields: object) -> Message:
    base: dict[str, object] = {"id": "1140429201295000-9262574723", "kind": BodyKind.TEXT}
    base.update(fields)
    return Message(b"", **base)  # type: ignore[arg-type]


# -- the seed's examples, as DropboxMQ 1.2 reads them ---------------------------------------


def test_seed_example_1_all_fields() -> None:
    d = dec(SEED_EXAMPLE_1)
    assert not d.foreign
    assert d.priority == 4
    assert d.id == "ID:1140429201295000-9262574723"  # JMSMessageID, as JMS shows it
    assert (d.timestamp, d.sequence) == (1140429201295, 0)
    assert d.kind is BodyKind.TEXT
    assert d.expiration == 1140429211295
    assert d.correlation_id == "corr1283"
    assert d.reply_to == "topic:estQueue1"  # 'T' is the kind: the topic estQueue1
    assert d.type == "XYZType"
    assert d.properties == {"prop1": "hello"}
    assert d.delivery_count == 0
    assert d.notes == ()


def test_seed_example_2_minimum_fields() -> None:
    d = dec(SEED_EXAMPLE_2)
    assert not d.foreign
    assert (d.priority, d.id, d.timestamp, d.kind) == (
        4,
        "ID:1140429201295000-9262574723",
        1140429201295,
        BodyKind.TEXT,
    )
    assert (d.expiration, d.correlation_id, d.reply_to, d.type) == (0, None, None, None)
    assert d.properties == {}


def test_seed_examples_encode_back() -> None:
    m = dec(SEED_EXAMPLE_1).to_message(b"hi")
    assert encode_filename(m) == SEED_EXAMPLE_1
    assert encode_filename(dec(SEED_EXAMPLE_2).to_message(b"")) == SEED_EXAMPLE_2


def test_to_message_builds_the_message() -> None:
    m = dec(SEED_EXAMPLE_1 + "&JMSXDeliveryCountI=2").to_message(b"body")
    assert m.body == b"body"
    assert m.text == "body"
    assert (m.id, m.priority, m.timestamp, m.expiration) == (
        "ID:1140429201295000-9262574723",
        4,
        1140429201295,
        1140429211295,
    )
    assert (m.correlation_id, m.reply_to, m.type) == ("corr1283", "topic:estQueue1", "XYZType")
    assert m.persistent
    assert (m.delivery_count, m.redelivered) == (2, True)
    assert m.properties == {"prop1": "hello"}
    assert m.kind is BodyKind.TEXT
    assert m.is_expired(NOW)


# -- decoding: fields --------------------------------------------------------------------


def test_everything_after_the_seventh_dot_is_properties_dots_included() -> None:
    d = dec("4.1.T.0.c.Qq.t.a.bS=x.y&c.dS=z")
    assert d.properties == {"a.b": "x.y", "c.d": "z"}


def test_missing_fields_and_trailing_dots_mean_the_same() -> None:
    plain = dec("7.1140429201295000-1.B")
    dotted = dec("7.1140429201295000-1.B.....")
    for d in (plain, dotted):
        assert not d.foreign
        assert (d.priority, d.kind, d.expiration, d.correlation_id, d.reply_to, d.type) == (
            7,
            BodyKind.BYTES,
            0,
            None,
            None,
            None,
        )


@pytest.mark.parametrize(
    ("field", "priority"),
    [("5", 5), ("+5", 5), ("5-3", 5), ("0", 0), ("05", 5), ("5-", 5)],
)
def test_priority_is_cut_at_the_first_dash_and_may_start_with_plus(
    field: str, priority: int
) -> None:
    d = dec(f"{field}.1.T")
    assert not d.foreign
    assert d.priority == priority


@pytest.mark.parametrize("field", ["-5", "", "x", "+", "5x", " 5", "99999999999"])
def test_a_priority_that_does_not_parse_makes_the_name_foreign(field: str) -> None:
    d = dec(f"{field}.1140429201295000-1.B")
    assert d.foreign
    assert d.priority == 4


def test_priority_above_nine_is_read_as_nine() -> None:
    d = dec("2147483647.1.T")  # Integer.MAX_VALUE: DropboxMQ keeps it, chute's range is 0..9
    assert not d.foreign
    assert d.priority == 9
    assert d.notes


def test_id_number_is_milliseconds_times_1000_plus_sequence() -> None:
    d = dec("4.1140429201295042-9262574723.T")
    assert (d.timestamp, d.sequence) == (1140429201295, 42)
    assert dec("4.+1140429201295042.T").timestamp == 1140429201295  # no '-', leading '+'


@pytest.mark.parametrize("id_", ["0-123", "abc-1", "-5", "x", "0", "1" * 25 + "-x"])
def test_an_id_without_a_time_gives_the_time_of_receipt(id_: str) -> None:
    d = dec(f"4.{id_}.T")
    assert not d.foreign
    assert d.id == "ID:" + id_
    assert (d.timestamp, d.sequence) == (NOW, 0)


def test_receipt_time_defaults_to_the_clock() -> None:
    assert decode_filename("4.x.T").timestamp > NOW


@pytest.mark.parametrize(
    ("letter", "kind"),
    [
        ("M", BodyKind.MESSAGE),
        ("B", BodyKind.BYTES),
        ("S", BodyKind.STREAM),
        ("P", BodyKind.MAP),
        ("O", BodyKind.OBJECT),
        ("T", BodyKind.TEXT),
    ],
)
def test_class_letters(letter: str, kind: BodyKind) -> None:
    d = dec(f"4.1.{letter}")
    assert not d.foreign
    assert d.kind is kind
    assert encode_filename(msg(id="1", kind=kind)) == f"4.1.{letter}"


def test_a_missing_class_means_text_not_bytes() -> None:
    for name in ("4.1", "4.1.", "4.1..5"):
        d = dec(name)
        assert not d.foreign
        assert d.kind is BodyKind.TEXT


@pytest.mark.parametrize("letter", ["t", "b", "X", "TT", "Bytes"])
def test_class_letters_are_case_sensitive_and_single(letter: str) -> None:
    d = dec(f"4.1.{letter}")
    assert d.foreign
    assert d.kind is BodyKind.TEXT


@pytest.mark.parametrize(
    ("field", "expiration"), [("", 0), ("0", 0), ("+123", 123), ("123-9", 123)]
)
def test_expiration(field: str, expiration: int) -> None:
    d = dec(f"4.1.T.{field}")
    assert not d.foreign
    assert d.expiration == expiration


@pytest.mark.parametrize("field", ["-123", "soon", "+", "9" * 20])
def test_an_expiration_that_does_not_parse_makes_the_name_foreign(field: str) -> None:
    d = dec(f"4.1.T.{field}")
    assert d.foreign
    assert d.expiration == 0


def test_correlation_id_and_type_are_url_decoded() -> None:
    d = dec("4.1.T..a+b%2Ec%26d%7E..x%C3%A9y*_-")
    assert d.correlation_id == "a b.c&d~"
    assert d.type == "xéy*_-"


def test_empty_correlation_id_and_type_are_none() -> None:
    d = dec("4.1.T.0...")
    assert (d.correlation_id, d.type) == (None, None)


@pytest.mark.parametrize(
    ("field", "reply_to"),
    [
        ("Qorders", "queue:orders"),
        ("Torders", "topic:orders"),
        ("TestQueue1", "topic:estQueue1"),
        ("Qa%2Eb+c", "queue:a.b c"),
        ("Xorders", None),
        ("qorders", None),
        ("orders", None),
        ("Q", None),
        ("", None),
    ],
)
def test_reply_to_first_character_is_the_kind(field: str, reply_to: str | None) -> None:
    assert dec(f"4.1.T...{field}").reply_to == reply_to


def test_reply_to_is_encoded_with_its_kind() -> None:
    for reply_to, field in [
        ("queue:orders", "Qorders"),
        ("topic:a.b", "Ta%2Eb"),
        ("/queue/x", "Qx"),
        ("/topic/x", "Tx"),
        ("bare", "Qbare"),
    ]:
        assert encode_filename(msg(id="1", reply_to=reply_to)) == f"4.1.T...{field}"


def test_reply_to_with_an_empty_name_is_refused() -> None:
    with pytest.raises(InvalidMessage):
        encode_filename(msg(reply_to="queue:"))


# -- decoding: foreign names ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "report.csv",  # priority is not a number
        "hello",  # no id
        "4",  # no id
        "4..T",  # empty id
        "4.1.X",  # unknown class
        "4.1.T.never",  # expiration does not parse
        "",
        ".",
        "..",
    ],
)
def test_foreign_names_get_dropboxmq_defaults(name: str) -> None:
    d = dec(name)
    assert d.foreign
    assert d.priority == 4
    assert d.expiration == 0
    assert d.id == "ID:" + name
    assert d.timestamp == NOW


def test_a_foreign_id_is_the_url_decoded_whole_name() -> None:
    d = dec("my+report%21.csv")
    assert d.foreign
    assert d.id == "ID:my report!.csv"
    assert d.kind is BodyKind.TEXT


def test_a_foreign_name_keeps_the_fields_that_parsed() -> None:
    d = dec("urgent.1.T.1000.corr.Qreplies.kind.aS=1&bI=2")
    assert d.foreign
    assert (d.priority, d.expiration) == (4, 0)  # expiration not applied
    assert (d.correlation_id, d.reply_to, d.type) == ("corr", "queue:replies", "kind")
    assert typed(d.properties) == typed({"a": "1", "b": Int(2)})


def test_a_foreign_name_is_timestamped_at_receipt() -> None:
    d = dec("1140429201295007-x")  # the whole name is the id, not a DropboxMQ id field
    assert d.foreign
    assert (d.timestamp, d.sequence) == (NOW, 0)


def test_a_foreign_name_survives_re_encoding() -> None:
    d = dec("report 1.final.csv")
    again = dec(d.with_delivery_count(1))
    assert not again.foreign
    assert (again.id, again.priority, again.kind, again.delivery_count) == (
        "ID:report 1.final.csv",
        4,
        BodyKind.TEXT,
        1,
    )


# -- properties ----------------------------------------------------------------------------


def test_properties_typed_by_the_last_letter_of_the_name() -> None:
    got = props("aB=true&bY=-8&cH=300&dI=70000&eL=5000000000&fF=1.5&gD=2.25&hS=text&iB=TRUE&jB=yes")
    assert typed(got) == typed(
        {
            "a": True,
            "b": Byte(-8),
            "c": Short(300),
            "d": Int(70000),
            "e": 5000000000,
            "f": Float(1.5),
            "g": 2.25,
            "h": "text",
            "i": True,
            "j": False,
        }
    )


def test_any_other_type_letter_means_string() -> None:
    assert typed(props("colorX=red&sizeI=1&lower=v")) == typed(
        {"color": "red", "size": Int(1), "lowe": "v"}
    )


def test_property_names_and_values_are_url_decoded() -> None:
    assert props("a+b%2EcS=x+y%26z%3D") == {"a b.c": "x y&z="}


def test_no_equals_gives_the_empty_value() -> None:
    assert typed(props("flagB&nameS")) == typed({"flag": False, "name": ""})


def test_empty_pairs_are_skipped() -> None:
    assert props("&&aS=1&&bS=2&") == {"a": "1", "b": "2"}


def test_later_duplicates_win() -> None:
    assert typed(props("aS=1&aI=2")) == typed({"a": Int(2)})


def test_a_later_equals_sign_keeps_the_full_value() -> None:
    # DropboxMQ keeps only "a" (hazard): chute keeps the whole value.
    assert props("exprS=a=b=c") == {"expr": "a=b=c"}


def test_non_identifier_names_and_what_follows_are_kept() -> None:
    # DropboxMQ drops "my-prop" and every property after it (hazard).
    got = props("okS=1&my-propS=2&9livesS=3&afterS=4")
    assert got == {"ok": "1", "my-prop": "2", "9lives": "3", "after": "4"}


def test_names_chute_cannot_hold_are_dropped_with_a_note() -> None:
    d = dec("4.1.T.....S=empty&=x&" + "n" * 300 + "S=long&keptS=1")
    assert d.properties == {"kept": "1"}
    assert len(d.notes) == 3


@pytest.mark.parametrize(
    "pair", ["nY=300", "nY=abc", "nI=", "nI=1.5", "nL=99999999999999999999", "nD=1,5"]
)
def test_a_value_not_of_its_type_is_kept_as_a_string(pair: str) -> None:
    d = dec("4.1.T....." + pair)
    assert typed(d.properties) == typed({"n": pair.split("=", 1)[1]})
    assert d.notes


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1.0E10", 1.0e10),
        ("-0.5", -0.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e%2B16", 1e16),
        ("1e-3", 1e-3),
        ("2f", 2.0),
        ("2D", 2.0),
        (" 3 ", 3.0),
        ("Infinity", math.inf),
        ("-Infinity", -math.inf),
    ],
)
def test_floats_parse_as_java_does(text: str, value: float) -> None:
    got = props(f"xD={text}")["x"]
    assert isinstance(got, float)
    assert got == value


@pytest.mark.parametrize("text", ["inf", "nan", "1_000", "0x1p3", "NaNf"])
def test_floats_java_rejects_stay_strings(text: str) -> None:
    assert props(f"xD={text}")["x"] == text


def test_nan_both_ways() -> None:
    value = props("xD=NaN")["x"]
    assert isinstance(value, float)
    assert math.isnan(value)
    assert encode_filename(msg(id="1", properties={"x": math.nan})) == "4.1.T.....xD=NaN"


def test_a_bad_percent_escape_is_kept_literally_and_consumed() -> None:
    d = dec("4.1.T..100%25+sure%.%zz.%ff%fe.a%S=50%&b%C3S=%C3")
    assert not d.foreign
    assert d.correlation_id == "100%25+sure%"  # the whole field, not half-decoded
    assert d.reply_to is None  # '%' is not a kind
    assert d.type == "%ff%fe"  # not UTF-8
    assert d.properties == {"a%": "50%", "b%C3": "%C3"}
    assert len(d.notes) >= 4


def test_a_bad_percent_escape_in_a_foreign_name() -> None:
    d = dec("100%.txt")
    assert d.foreign
    assert d.id == "ID:100%.txt"


# -- the delivery count ---------------------------------------------------------------------


def test_delivery_count_lives_in_the_name() -> None:
    d = dec("4.1.T.....aS=1&JMSXDeliveryCountI=3")
    assert d.delivery_count == 3
    assert d.properties == {"a": "1"}
    assert encode_filename(d.to_message(b"")) == "4.1.T.....aS=1&JMSXDeliveryCountI=3"


def test_with_delivery_count_sets_or_replaces_it() -> None:
    first = dec(SEED_EXAMPLE_1).with_delivery_count(1)
    assert first == SEED_EXAMPLE_1 + "&JMSXDeliveryCountI=1"
    second = dec(first).with_delivery_count(2)
    assert second == SEED_EXAMPLE_1 + "&JMSXDeliveryCountI=2"
    assert dec(SEED_EXAMPLE_2).with_delivery_count(1) == (
        SEED_EXAMPLE_2 + ".....JMSXDeliveryCountI=1"
    )


@pytest.mark.parametrize("value", ["JMSXDeliveryCountS=4", "JMSXDeliveryCountL=4"])
def test_delivery_count_of_another_type_is_still_read(value: str) -> None:
    assert dec("4.1.T....." + value).delivery_count == 4


@pytest.mark.parametrize("value", ["JMSXDeliveryCountI=-1", "JMSXDeliveryCountS=many"])
def test_a_bad_delivery_count_is_ignored_with_a_note(value: str) -> None:
    d = dec("4.1.T....." + value)
    assert (d.delivery_count, d.properties) == (0, {})
    assert d.notes


def test_a_property_named_like_the_delivery_count_is_refused() -> None:
    with pytest.raises(InvalidMessage):
        encode_filename(msg(properties={"JMSXDeliveryCount": 1}))


# -- encoding --------------------------------------------------------------------------------


def test_fields_after_the_last_non_empty_one_are_left_out() -> None:
    assert encode_filename(msg(id="ID")) == "4.ID.T"
    assert encode_filename(msg(id="ID", expiration=5)) == "4.ID.T.5"


def test_empty_slots_before_the_last_field_stay() -> None:
    assert encode_filename(msg(id="ID", type="XYZType")) == "4.ID.T....XYZType"
    assert encode_filename(msg(id="ID", correlation_id="c")) == "4.ID.T..c"


def test_text_is_form_encoded_then_dots_and_tildes_escaped() -> None:
    assert enc("a b*c-d_e.f~g&h=i/j%k+l") == "a+b*c-d_e%2Ef%7Eg%26h%3Di%2Fj%25k%2Bl"
    assert enc("é") == "%C3%A9"
    assert encode_filename(msg(id="ID", correlation_id="x.y z")) == "4.ID.T..x%2Ey+z"


def test_property_encoding() -> None:
    name = encode_filename(
        msg(
            id="ID",
            properties={
                "b": True,
                "y": Byte(1),
                "h": Short(2),
                "i": Int(3),
                "l": 4,
                "f": Float(0.5),
                "d": 1e16,
                "s": "a.b&c",
                "né$_1": "v",
            },
        )
    )
    assert name == (
        "4.ID.T.....bB=true&yY=1&hH=2&iI=3&lL=4&fF=0%2E5&dD=1e%2B16&sS=a%2Eb%26c&n%C3%A9%24_1S=v"
    )


@pytest.mark.parametrize("name", ["a", "_x", "$y", "\u00e9t\u00e9", "x1", "JMS_dropboxmq_x"])
def test_java_identifiers_are_written(name: str) -> None:
    assert is_java_identifier(name)
    assert dec(encode_filename(msg(id="1", properties={name: 1}))).properties == {name: 1}


@pytest.mark.parametrize("name", ["content-type", "x-trace", "a.b", "1x", "a b", "\u20ac-"])
def test_names_dropboxmq_cannot_read_are_not_written(name: str) -> None:
    """DropboxMQ refuses them, and drops every property after one."""
    assert not is_java_identifier(name)
    name_ = encode_filename(msg(id="1", properties={name: "v", "after": "w"}))
    assert name_ == "4.1.T.....afterS=w"


def test_only_lost_meaning_is_reported() -> None:
    """content-type is implied by the body kind; any other unwritten name is lost."""
    properties: dict[str, PropertyValue] = {
        "content-type": "text/plain",
        "x-trace": "1",
        "ok": 2,
        "a.b": 3,
    }
    assert lost_properties(properties) == ["x-trace", "a.b"]


def test_infinite_doubles_are_written_as_java_reads_them() -> None:
    name = encode_filename(msg(id="1", properties={"p": math.inf, "n": -math.inf}))
    assert name == "4.1.T.....pD=Infinity&nD=-Infinity"


def test_id_is_encoded_and_a_missing_id_gets_a_dropboxmq_id() -> None:
    assert encode_filename(msg(id="a.b/c")) == "4.a%2Eb%2Fc.T"
    name = encode_filename(msg(id="", timestamp=1140429201295), sequence=7)
    d = dec(name)
    assert (d.timestamp, d.sequence) == (1140429201295, 7)
    name = encode_filename(msg(id=""), sequence=1007, now_ms=NOW)
    assert (dec(name).timestamp, dec(name).sequence) == (NOW, 7)


def test_dropbox_id_shape() -> None:
    assert dropbox_id(1140429201295, 0, 9262574723) == "1140429201295000-9262574723"
    assert dropbox_id(5, 12, 3) == "0000000000005012-0000000003"
    assert len(dropbox_id(NOW, 999)) == 27


@pytest.mark.parametrize(
    "fields",
    [
        {"priority": 10},
        {"priority": -1},
        {"expiration": -1},
        {"delivery_count": -1},
        {"properties": {"": "x"}},
        {"properties": {"n" * 257: "x"}},
        {"properties": {"x": [1]}},
        {"properties": {"x": 1 << 64}},
        {"correlation_id": "\ud800"},
        {"id": "a\udcff"},
    ],
)
def test_encode_refuses_what_it_cannot_write_safely(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidMessage):
        encode_filename(msg(**fields))


def test_dropbox_id_refuses_negative_parts() -> None:
    with pytest.raises(InvalidMessage):
        dropbox_id(-1, 0)


# -- hostile names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "4.1.T..../../../x",
        "a/b",
        "4.1.T\x00evil",
        "\udcff\udcfe.bin",  # non-UTF-8 bytes from os.listdir (surrogateescape)
        "4." + "9" * 5000 + ".T",
        "4.1.T....." + "&" * 10_000,
        "4.1.T....." + "a%" * 5000,
        "." * 1000,
        "x" * 100_000,
        "4.1.T....." + "=" * 300,
        "\n\t\r",
    ],
)
def test_decode_never_crashes(name: str) -> None:
    d = dec(name)
    assert isinstance(d.to_message(b""), Message)


@given(st.text(max_size=300))
@settings(max_examples=300)
def test_decode_never_raises_on_any_text(name: str) -> None:
    d = decode_filename(name, now_ms=NOW)
    assert 0 <= d.priority <= 9
    assert d.expiration >= 0
    d.to_message(b"x")


@given(st.text(alphabet="0123456789.+-%&=QTBYHILFDSMPOabc", max_size=80))
def test_decode_never_raises_on_near_valid_names(name: str) -> None:
    decode_filename(name, now_ms=NOW)


def test_encoded_names_never_hold_path_characters() -> None:
    name = encode_filename(
        msg(
            id="../x",
            correlation_id="/etc",
            reply_to="queue:a/b",
            type="\x00",
            properties={"../p": "..\\q"},
        )
    )
    assert "/" not in name
    assert "\\" not in name
    assert "\x00" not in name
    assert not name.startswith(".")
    assert name.split(".", 7)[:3] == ["4", "%2E%2E%2Fx", "T"]


def test_a_name_too_long_to_claim_is_refused_not_spilled() -> None:
    base = msg(id="x", properties={"p": "v"})
    room = NAME_MAX_BYTES - DEFAULT_CLAIM_ROOM - len(encode_filename(base))
    fits = msg(id="x" * (1 + room), properties={"p": "v"})
    assert len(encode_filename(fits)) + DEFAULT_CLAIM_ROOM == NAME_MAX_BYTES
    with pytest.raises(InvalidMessage, match="must fit 255 bytes, so 227 at most"):
        encode_filename(msg(id="x" * (2 + room), properties={"p": "v"}))
    with pytest.raises(InvalidMessage):
        encode_filename(msg(properties={f"p{i}": "v" * 20 for i in range(20)}))


def test_a_name_fits_when_its_claim_does_as_in_dropboxmq() -> None:
    """DropboxMQ's consumer reads any name it can claim: no room is kept for a count.
    A count is written where it fits; where it does not, with_delivery_count says so
    (the consumer then keeps the name, or sends a redelivery to error/)."""
    client = "consumer-7"
    room = claim_room([client])
    longest = msg(id="x" * (NAME_MAX_BYTES - room - len("4..T")))
    name = encode_filename(longest, claim_room=room)
    assert len(claim_name(client, name).encode()) == NAME_MAX_BYTES  # 244 + 11 bytes
    with pytest.raises(InvalidMessage):
        dec(name).with_delivery_count(1, claim_room=room)
    with pytest.raises(InvalidMessage):
        encode_filename(longest, claim_room=room + 1)
    shorter = msg(id="x" * (NAME_MAX_BYTES - room - len("4..T.....JMSXDeliveryCountI=999")))
    counted = dec(encode_filename(shorter, claim_room=room)).with_delivery_count(
        999, claim_room=room
    )
    assert len(claim_name(client, counted).encode()) == NAME_MAX_BYTES


def test_the_room_reserved_is_the_claimants_not_the_longest_client_id() -> None:
    """A realistic DropboxMQ name (10 typed properties, a correlation id, a reply-to
    and a type: ~200 bytes) is written when its claimants' ids leave room for it."""
    realistic = msg(
        priority=3,
        kind=BodyKind.BYTES,
        reply_to="topic:news.eu",
        type="Order.v1",
        properties={
            "b": False,
            "r": "base",
            "s": "a.b&c=d~e%f/g+ é€",
            "d": 220.75,
            "f": Float(110.375),
            "h": Short(12671),
            "y": Byte(-13),
            "i": Int(883002649),
            "l": 883000006181,
            "n": Int(883),
        },
    )
    name = encode_filename(realistic)  # room for DropboxMQ's generated client ids
    assert len(name) > 172
    assert encode_filename(realistic, claim_room=claim_room(["javaC"])) == name
    longer = realistic.replace(correlation_id="c-883.x" + "c" * 22)
    assert len(encode_filename(longer, claim_room=claim_room(["javaC"]))) > 227
    with pytest.raises(InvalidMessage, match="28-byte client prefix"):
        encode_filename(longer)
    with pytest.raises(InvalidMessage, match="48-byte client prefix"):
        encode_filename(longer, claim_room=claim_room(["c" * (MAX_CLIENT_ID_BYTES - 1)]))


def test_a_long_foreign_name_decodes_and_refuses_to_grow_past_the_limit() -> None:
    d = dec("r" * 200 + ".csv")
    assert d.foreign
    with pytest.raises(InvalidMessage):
        d.with_delivery_count(1)  # no room for a generated client id's claim
    assert dec(d.with_delivery_count(1, claim_room=claim_room(["c"]))).id == d.id


# -- round trip ---------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
_value = st.one_of(
    st.booleans(),
    st.integers(-(2**7), 2**7 - 1).map(Byte),
    st.integers(-(2**15), 2**15 - 1).map(Short),
    st.integers(-(2**31), 2**31 - 1).map(Int),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False).map(Float),
    st.floats(allow_nan=False),
    st.text(st.characters(codec="utf-8"), max_size=12),
)
# Java identifiers: what a DropboxMQ reader can read (other names are not written).
_names = st.from_regex(r"[A-Za-z_$\u00e9][A-Za-z0-9_$\u00e9\u0660]{0,8}", fullmatch=True).filter(
    lambda n: n != "JMSXDeliveryCount"
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    timestamp = draw(st.integers(1, 10**13))
    sequence = draw(st.integers(0, 999))
    # A DropboxMQ-style id carries the timestamp; any other id is kept as it is.
    message_id = draw(
        st.one_of(st.just(dropbox_id(timestamp, sequence, draw(st.integers(0, 10**10)))), _text)
    )
    return Message(
        draw(st.binary(max_size=8)),
        id=message_id,
        priority=draw(st.integers(0, 9)),
        timestamp=timestamp,
        expiration=draw(st.integers(0, 2**63 - 1) | st.just(0)),
        correlation_id=draw(st.none() | _text),
        reply_to=draw(
            st.none() | st.builds(lambda k, n: k + n, st.sampled_from(["queue:", "topic:"]), _text)
        ),
        type=draw(st.none() | _text),
        delivery_count=draw(st.integers(0, 2**31 - 1)),
        redelivered=False,
        properties=draw(st.dictionaries(_names, _value, max_size=4)),
        kind=draw(st.sampled_from(list(BodyKind))),
    )


def _encoded(message: Message) -> str:
    try:
        return encode_filename(message)
    except InvalidMessage as exc:
        if "must fit" in exc.reason:
            reject()  # too long for a filename: the length tests' matter
        raise


@given(messages())
@settings(max_examples=500)
def test_round_trip(message: Message) -> None:
    name = _encoded(message)
    d = decode_filename(name, now_ms=NOW)
    assert not d.foreign
    assert d.notes == ()
    back = d.to_message(message.body)
    for field in (
        "body",
        "priority",
        "expiration",
        "correlation_id",
        "reply_to",
        "type",
        "delivery_count",
        "kind",
    ):
        assert getattr(back, field) == getattr(message, field), field
    assert typed(back.properties) == typed(message.properties)
    # the id is JMS's: behind "ID:", which the id field leaves out
    assert back.id == (message.id if message.id.startswith("ID:") else "ID:" + message.id)
    assert back.persistent
    assert back.redelivered == (message.delivery_count > 0)
    if re.fullmatch(r"[0-9]{16}-[0-9]{10}", message.id):
        assert back.timestamp == message.timestamp
    # decoding then encoding again gives the same name (a consumer can rename it)
    assert encode_filename(back) == name


@given(messages())
def test_encoded_names_are_safe_filenames(message: Message) -> None:
    try:
        name = encode_filename(message)
    except InvalidMessage:
        return  # over the default limit
    assert len(name.encode()) + DEFAULT_CLAIM_ROOM <= NAME_MAX_BYTES
    assert set(name) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789*-_+%.&="
    )
    assert name.count(".") <= 7
