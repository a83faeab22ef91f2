"""Step 5: resolving `target_user`, stage by stage (docs/behaviour.md, "Resolving target_user")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import Participant
from worker.core.model import AmbiguousUser, DirectoryMember, NoSuchUser, Resolution, ResolvedUser
from worker.core.resolve import (
    MAX_CANDIDATES,
    is_current_member,
    member_label,
    resolve_target_user,
)

ALICE_ID = "100000000000000001"
BOB_ID = "100000000000000002"
CAROL_ID = "100000000000000003"
DAVE_ID = "100000000000000004"
BOT_ID = "100000000000000099"
MATRIX_ID = "@alice:matrix.org"


def person(
    user_id: str,
    label: str,
    *aliases: str,
    is_bot: bool = False,
    is_member: bool = True,
) -> Participant:
    return Participant(
        user_id=user_id,
        display_label=label,
        aliases=aliases,
        is_bot=is_bot,
        is_member=is_member,
    )


def member(
    user_id: str,
    username: str,
    display_name: str | None = None,
    global_name: str | None = None,
    user_nickname: str | None = None,
    *,
    is_bot: bool = False,
) -> DirectoryMember:
    return DirectoryMember(
        user_disc_id=user_id,
        username=username,
        display_name=display_name,
        global_name=global_name,
        user_nickname=user_nickname,
        is_bot=is_bot,
    )


def resolve(
    query: str,
    participants: list[Participant] | None = None,
    directory: list[DirectoryMember] | None = None,
    *,
    is_dm: bool = False,
) -> Resolution:
    return resolve_target_user(query, participants or [], directory or [], is_dm=is_dm)


def resolved(resolution: Resolution) -> ResolvedUser:
    assert isinstance(resolution, ResolvedUser), resolution
    return resolution


def ambiguous(resolution: Resolution) -> tuple[str, ...]:
    assert isinstance(resolution, AmbiguousUser), resolution
    return resolution.candidates


# Labels.


@pytest.mark.parametrize(
    ("directory_member", "label"),
    [
        (member(ALICE_ID, "alice", "Alice"), "Alice"),  # same name, case aside
        (member(ALICE_ID, "alice", "Ali"), "Ali (@alice)"),
        (member(ALICE_ID, "alice", None, "Alice G"), "Alice G (@alice)"),
        (member(ALICE_ID, "alice", None, "ALICE"), "ALICE"),
        (member(ALICE_ID, "alice"), "alice"),
        (member(ALICE_ID, "alice", "", ""), "alice"),  # empty names count as absent
        (member(ALICE_ID, "alice", "Ali", "Alice G"), "Ali (@alice)"),  # display name first
    ],
)
def test_member_label(directory_member: DirectoryMember, label: str) -> None:
    assert member_label(directory_member) == label


# Stage 1: Matrix ids.


@pytest.mark.parametrize("query", [MATRIX_ID, "@Alice:Matrix.ORG", f"  {MATRIX_ID}  "])
def test_matrix_id_of_a_participant(query: str) -> None:
    bridge = person(MATRIX_ID, "alice (matrix)", "alice")
    found = resolved(resolve(query, [bridge]))
    assert found == ResolvedUser(user_id=MATRIX_ID, label="alice (matrix)", via="matrix")


def test_matrix_participant_ids_compare_case_folded() -> None:
    bridge = person("@Alice:Matrix.org", "Alice", "alice")
    assert resolved(resolve(MATRIX_ID, [bridge])).user_id == "@Alice:Matrix.org"


def test_matrix_id_wins_over_an_alias() -> None:
    bridge = person(MATRIX_ID, "alice (matrix)")
    impostor = person(BOB_ID, "Bob", "alice:matrix.org")
    assert resolved(resolve(MATRIX_ID, [impostor, bridge])).via == "matrix"


def test_unknown_matrix_id_falls_through_to_names() -> None:
    other = person(BOB_ID, "Bob", "@alice:matrix.org")
    found = resolved(resolve(MATRIX_ID, [other]))
    assert (found.user_id, found.via) == (BOB_ID, "participant")


def test_unknown_matrix_id_names_nobody() -> None:
    assert resolve(MATRIX_ID, [person(BOB_ID, "Bob", "bob")]) == NoSuchUser()


def test_a_bridge_user_found_by_alias_keeps_its_matrix_id() -> None:
    bridge = person(MATRIX_ID, "alice (matrix)", "Alice")
    found = resolved(resolve("alice", [bridge]))
    assert (found.user_id, found.via) == (MATRIX_ID, "participant")


# Stage 2: mentions and bare ids.


@pytest.mark.parametrize("query", [f"<@{ALICE_ID}>", f"<@!{ALICE_ID}>", ALICE_ID, f" {ALICE_ID} "])
def test_mention_or_id_of_a_directory_member(query: str) -> None:
    found = resolved(resolve(query, [], [member(ALICE_ID, "alice", "Ali")]))
    assert found == ResolvedUser(user_id=ALICE_ID, label="Ali (@alice)", via="mention")


@pytest.mark.parametrize("query", [f"<@{ALICE_ID}>", f"<@!{ALICE_ID}>", ALICE_ID])
def test_mention_or_id_of_a_participant(query: str) -> None:
    found = resolved(resolve(query, [person(ALICE_ID, "Alice (@alice)", "Alice")]))
    assert found == ResolvedUser(user_id=ALICE_ID, label="Alice (@alice)", via="mention")


def test_short_mentions_are_mentions() -> None:
    found = resolved(resolve("<@123>", [person("123", "Old Timer")]))
    assert (found.user_id, found.via) == ("123", "mention")


def test_directory_label_is_preferred_for_a_mention() -> None:
    found = resolved(
        resolve(ALICE_ID, [person(ALICE_ID, "Alice from chat")], [member(ALICE_ID, "alice", "A")])
    )
    assert found.label == "A (@alice)"


@pytest.mark.parametrize(
    ("participants", "directory"),
    [
        ([], [member(BOT_ID, "tomori", is_bot=True)]),
        ([person(BOT_ID, "Tomori", is_bot=True)], []),
        ([person(BOT_ID, "Tomori", is_bot=True)], [member(BOT_ID, "tomori")]),
        ([person(BOT_ID, "Tomori")], [member(BOT_ID, "tomori", is_bot=True)]),
    ],
)
def test_a_mentioned_bot_is_found_as_a_bot(
    participants: list[Participant], directory: list[DirectoryMember]
) -> None:
    found = resolved(resolve(f"<@{BOT_ID}>", participants, directory))
    assert (found.user_id, found.is_bot) == (BOT_ID, True)


def test_unknown_mention_names_nobody_never_a_name() -> None:
    namesake = person(BOB_ID, "Bob", ALICE_ID, f"<@{ALICE_ID}>")
    assert resolve(ALICE_ID, [namesake], [member(CAROL_ID, ALICE_ID)]) == NoSuchUser()
    assert resolve(f"<@{ALICE_ID}>", [namesake]) == NoSuchUser()


@pytest.mark.parametrize(
    "query",
    [
        "1234567890123456",  # 16 digits: a name, not an id
        "123456789012345678901",  # 21 digits
        f"@{ALICE_ID}",
        f"<@{ALICE_ID}",
        f"<#{ALICE_ID}>",
        f"<@&{ALICE_ID}>",  # a role mention
    ],
)
def test_shapes_that_are_not_ids_are_names(query: str) -> None:
    namesake = person(BOB_ID, "Bob", query)
    assert resolved(resolve(query, [namesake], [member(ALICE_ID, "alice")])).user_id == BOB_ID


def test_non_ascii_digits_are_not_an_id() -> None:
    arabic_indic = "١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦٧٨"
    assert resolve(arabic_indic, [], [member(ALICE_ID, "alice")]) == NoSuchUser()


# Stage 3: participants.


@pytest.mark.parametrize("query", ["Alice", "alice", "@alice", "  ALICE ", "@ Alice"])
def test_participant_by_alias(query: str) -> None:
    alice = person(ALICE_ID, "Alice (@alice)", "Alice", "ally")
    assert resolved(resolve(query, [alice])) == ResolvedUser(
        user_id=ALICE_ID, label="Alice (@alice)", via="participant"
    )


def test_aliases_are_normalized_too() -> None:
    alice = person(ALICE_ID, "Mary Jane", "  @Mary \t JANE ")
    assert resolved(resolve("mary jane", [alice])).user_id == ALICE_ID


def test_any_alias_matches() -> None:
    alice = person(ALICE_ID, "Alice", "Alice", "Wonderland", "ally")
    assert resolved(resolve("wonderland", [alice])).user_id == ALICE_ID


def test_one_user_listed_twice_is_one_user() -> None:
    found = resolve("alice", [person(ALICE_ID, "Alice", "alice"), person(ALICE_ID, "A", "Alice")])
    assert resolved(found).user_id == ALICE_ID


def test_several_participants_are_ambiguous() -> None:
    participants = [person(ALICE_ID, "Alex A", "Alex"), person(BOB_ID, "Alex B", "alex")]
    assert ambiguous(resolve("alex", participants)) == ("Alex A", "Alex B")


def test_participants_win_over_the_directory() -> None:
    participants = [person(ALICE_ID, "Alice (chat)", "Alice")]
    directory = [member(BOB_ID, "alice", "Alice")]
    found = resolved(resolve("alice", participants, directory))
    assert (found.user_id, found.via) == (ALICE_ID, "participant")


def test_a_participant_bot_is_found_as_a_bot() -> None:
    found = resolved(resolve("tomori", [person(BOT_ID, "Tomori", "Tomori", is_bot=True)]))
    assert found.is_bot


def test_a_participant_bot_and_a_person_are_ambiguous() -> None:
    participants = [
        person(BOT_ID, "Tomori", "Tomori", is_bot=True),
        person(ALICE_ID, "Tomo", "tomori"),
    ]
    assert ambiguous(resolve("tomori", participants)) == ("Tomo", "Tomori")


def test_display_label_is_not_an_alias_before_the_directory() -> None:
    # Aliases only at stage 3; the directory's own names come first.
    participants = [person(ALICE_ID, "bob")]
    directory = [member(BOB_ID, "bob")]
    assert resolved(resolve("bob", participants, directory)).user_id == BOB_ID


# Stage 4: DMs.


def test_a_dm_searches_no_directory() -> None:
    directory = [member(ALICE_ID, "alice", "Alice")]
    assert resolve("alice", [], directory, is_dm=True) == NoSuchUser()
    assert resolved(resolve("alice", [], directory, is_dm=False)).user_id == ALICE_ID


def test_a_dm_still_resolves_participants_and_ids() -> None:
    alice = person(ALICE_ID, "Alice", "alice")
    assert resolved(resolve("Alice", [alice], is_dm=True)).user_id == ALICE_ID
    assert resolved(resolve(f"<@{ALICE_ID}>", [alice], is_dm=True)).user_id == ALICE_ID


# Stage 5: the directory, field by field.


@pytest.mark.parametrize(
    ("query", "expected_id"),
    [
        ("Sunny", ALICE_ID),  # Alice's display name, Bob's nickname
        ("Moon", BOB_ID),  # Bob's nickname, Carol's global name
        ("Star", CAROL_ID),  # Carol's global name, Dave's username
        ("dave", DAVE_ID),
    ],
)
def test_directory_fields_in_order(query: str, expected_id: str) -> None:
    directory = [
        member(ALICE_ID, "alice", display_name="Sunny"),
        member("500000000000000001", "x1", user_nickname="Sunny"),
        member(BOB_ID, "bob", user_nickname="Moon"),
        member("500000000000000002", "x2", global_name="Moon"),
        member(CAROL_ID, "carol", global_name="Star"),
        member("500000000000000003", "star"),
        member(DAVE_ID, "dave"),
    ]
    found = resolved(resolve(query, [], directory))
    assert (found.user_id, found.via) == (expected_id, "directory")
    # The order of the rows does not matter, only the order of the fields.
    assert resolved(resolve(query, [], list(reversed(directory)))).user_id == expected_id


DIRECTORY_FIELDS = ["display_name", "user_nickname", "global_name", "username"]


def known_as(user_id: str, field: str, name: str) -> DirectoryMember:
    """A member whose only name equal to `name` is the given field."""
    return member(
        user_id,
        name if field == "username" else f"user{user_id[-2:]}",
        display_name=name if field == "display_name" else None,
        global_name=name if field == "global_name" else None,
        user_nickname=name if field == "user_nickname" else None,
    )


@pytest.mark.parametrize("winner", range(len(DIRECTORY_FIELDS)))
def test_each_directory_field_wins_over_later_ones(winner: int) -> None:
    directory = [
        known_as(f"2000000000000000{index:02}", field, "Zed")
        for index, field in enumerate(DIRECTORY_FIELDS)
    ][winner:]
    found = resolved(resolve("zed", [], list(reversed(directory))))
    assert found.user_id == f"2000000000000000{winner:02}"


@pytest.mark.parametrize(
    ("field", "candidates"),
    [
        ("display_name", ("Zed (@user01)", "ZED (@user02)")),
        ("user_nickname", ("user01", "user02")),
        ("global_name", ("Zed (@user01)", "ZED (@user02)")),
        ("username", ("Zed", "ZED")),
    ],
)
def test_ambiguity_within_a_directory_field(field: str, candidates: tuple[str, ...]) -> None:
    directory = [
        known_as("200000000000000001", field, "Zed"),
        known_as("200000000000000002", field, "ZED"),
    ]
    assert ambiguous(resolve("zed", [], directory)) == candidates


def test_ambiguity_by_username_across_case() -> None:
    directory = [member(ALICE_ID, "Zed"), member(BOB_ID, "zed")]
    assert ambiguous(resolve("@ZED", [], directory)) == ("Zed", "zed")


def test_directory_excludes_bots_from_names() -> None:
    directory = [member(BOT_ID, "helper", "Alice", is_bot=True), member(ALICE_ID, "alice")]
    found = resolved(resolve("alice", [], directory))
    assert (found.user_id, found.is_bot) == (ALICE_ID, False)
    assert resolve("helper", [], directory) == NoSuchUser()


def test_nobody_matches() -> None:
    participants = [person(ALICE_ID, "Alice", "alice")]
    directory = [member(BOB_ID, "bob", "Bobby", "Robert", "Rob")]
    assert resolve("carol", participants, directory) == NoSuchUser()


@pytest.mark.parametrize("query", ["@", " @ ", "@\t"])
def test_a_blank_name_names_nobody(query: str) -> None:
    participants = [person(ALICE_ID, "Alice", "@", "")]
    directory = [member(BOB_ID, "bob", "@", "")]
    assert resolve(query, participants, directory) == NoSuchUser()


def test_candidates_are_at_most_three_in_a_stable_order() -> None:
    directory = [
        member(f"30000000000000000{index}", f"user{index}", "Sam") for index in (5, 3, 1, 4, 2)
    ]
    first = ambiguous(resolve("sam", [], directory))
    assert len(first) == MAX_CANDIDATES
    assert first == ("Sam (@user1)", "Sam (@user2)", "Sam (@user3)")
    assert ambiguous(resolve("sam", [], list(reversed(directory)))) == first


# Beyond the spec: a candidate label is itself a way to name the person.


def test_a_candidate_label_resolves_to_that_person() -> None:
    directory = [member(ALICE_ID, "alex1", "Alex"), member(BOB_ID, "alex2", "Alex")]
    labels = ambiguous(resolve("Alex", [], directory))
    assert labels == ("Alex (@alex1)", "Alex (@alex2)")
    assert resolved(resolve(labels[0], [], directory)).user_id == ALICE_ID
    assert resolved(resolve(labels[1], [], directory)).user_id == BOB_ID


def test_a_participant_label_resolves_also_in_a_dm() -> None:
    alice = person(ALICE_ID, "Alice (@alice)", "Alice")
    assert resolved(resolve("alice (@alice)", [alice], is_dm=True)).user_id == ALICE_ID


def test_labels_are_the_last_resort() -> None:
    # "bob" is Alice's label but Bob's username: the username stage decides.
    participants = [person(ALICE_ID, "bob")]
    assert resolved(resolve("bob", participants, [member(BOB_ID, "bob")])).user_id == BOB_ID


def test_bot_labels_are_not_searched_in_the_directory() -> None:
    directory = [member(BOT_ID, "tomori", "Tomo", is_bot=True)]
    assert resolve("Tomo (@tomori)", [], directory) == NoSuchUser()


names = st.sampled_from(["Alex", "alex", "ALEX", "Sam", "sam", " al ex", "@alex", "Bo"])


@given(
    st.lists(
        st.tuples(names, st.one_of(st.none(), names), st.one_of(st.none(), names)),
        min_size=1,
        max_size=6,
    ),
    names,
)
def test_resolution_is_consistent(
    people: list[tuple[str, str | None, str | None]], query: str
) -> None:
    directory = [
        member(f"40000000000000000{index}", f"{username}{index}", display, nickname)
        for index, (username, display, nickname) in enumerate(people)
    ]
    result = resolve(query, [], directory)
    if isinstance(result, AmbiguousUser):
        assert 2 <= len(result.candidates) <= MAX_CANDIDATES
        assert list(result.candidates) == sorted(
            result.candidates, key=lambda label: label.casefold()
        )
        assert resolve(query, [], list(reversed(directory))) == result
    elif isinstance(result, ResolvedUser):
        assert any(m.user_disc_id == result.user_id for m in directory)
        assert resolve(query, [], list(reversed(directory))) == result


# Current membership.


def test_is_current_member() -> None:
    directory = [member(ALICE_ID, "alice")]
    participants = [
        person(BOB_ID, "Bob"),
        person(CAROL_ID, "Carol", is_member=False),
        person(ALICE_ID, "Alice", is_member=False),
    ]
    assert is_current_member(ALICE_ID, participants, directory)  # the directory says so
    assert is_current_member(BOB_ID, participants, directory)  # is_member defaults to true
    assert not is_current_member(CAROL_ID, participants, directory)
    assert not is_current_member(DAVE_ID, participants, directory)
    assert not is_current_member(ALICE_ID, [], [])
