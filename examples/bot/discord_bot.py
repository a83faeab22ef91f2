"""The hikari side: a mention, or any DM, answered by the persona; `/memory list`, `/memory
export` (a JSON file in a DM), `/memory forget-me` (confirmed by a button). Run it with
`python -m examples.bot.discord_bot` (`DISCORD_TOKEN`, `LTM_BOT_PERSONA_ID`, `LTM_LLM_*`)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Final

import hikari

from contracts import MemoryListing, Participant, RequestContext
from examples.bot.llm import ChatCompletions, LlmUnavailable
from examples.bot.memory import Persona
from gateway import Gateway, MessageContext, ToolClientUnavailable
from infra.observability.logs import configure_logging, get_logger
from infra.settings import Settings

__all__ = ["FORGET_ME", "MemoryBot", "answer_message", "confirm_forget_me", "participant"]
__all__ += ["memory_export", "memory_forget_me", "memory_list", "register_memory_command"]

log = get_logger(__name__)

FORGET_ME: Final = "memory-forget-me"  # the button's custom id: this, a colon, the user's id
SUBCOMMANDS: Final = {
    "list": "What I remember of this server and of you",
    "export": "Everything I hold about you, as a JSON file in a DM",
    "forget-me": "Forget everything about you (asks you to confirm)",
}
NO_ANSWER: Final = "The memory service did not answer; try again later."
EPHEMERAL: Final = hikari.MessageFlag.EPHEMERAL
MESSAGE: Final = hikari.ResponseType.MESSAGE_CREATE


def participant(user: hikari.User, nickname: str | None = None) -> Participant:
    """A person as the LLM sees them, and may name them (`target_user`)."""
    name = nickname or user.global_name or user.username
    label = name if name.casefold() == user.username.casefold() else f"{name} (@{user.username})"
    aliases = tuple(dict.fromkeys((name, user.username)))
    return Participant(
        user_id=str(user.id), display_label=label, aliases=aliases, is_bot=user.is_bot
    )


async def answer_message(
    event: hikari.MessageCreateEvent, me: hikari.User, persona: Persona, persona_id: int
) -> None:
    """Answers a message that mentions the bot, or any in a DM; leaves the others."""
    message, author = event.message, event.author
    if author.is_bot or not message.content:
        return
    if message.guild_id is not None and me.id not in (message.user_mentions_ids or ()):
        return
    member = event.member if isinstance(event, hikari.GuildMessageCreateEvent) else None
    mentioned = [u for u in (message.user_mentions or {}).values() if u.id != me.id]
    people = [participant(author, member.nickname if member else None)]
    people += [participant(user) for user in mentioned]
    where = MessageContext(
        message.guild_id, message.channel_id, author.id, me.id, persona_id, event.shard.id, people
    )
    text = f"{people[0].display_label}: {message.content.replace(f'<@{me.id}>', persona.name)}"
    try:
        reply, _ = await persona.reply(where, text, reply_id=str(message.id))
    except LlmUnavailable as error:
        log.warning("bot.llm_unavailable", message_id=str(message.id), error=str(error))
        reply = "I cannot think right now; ask me again in a moment."
    await message.respond(reply[:2000] or "…", reply=True)  # Discord's limit: 2000 characters


async def register_memory_command(rest: hikari.api.RESTClient) -> None:
    """Creates (or replaces) the global `/memory` command; the bot's other commands stay."""
    options = [
        hikari.CommandOption(type=hikari.OptionType.SUB_COMMAND, name=name, description=text)
        for name, text in SUBCOMMANDS.items()
    ]
    application = await rest.fetch_application()
    await rest.create_slash_command(application, "memory", "What I remember", options=options)


async def memory_list(
    interaction: hikari.CommandInteraction, gateway: Gateway, persona_id: int
) -> None:
    user = str(interaction.user.id)
    server_key = str(interaction.guild_id or user)
    try:
        listing = await gateway.memories.read(server_key, persona_id, [user])
    except LookupError:
        listing = MemoryListing()
    lines = ["Server memories:", *listing.server_lines()]
    text = "\n".join([*lines, "About you:", *listing.personal_lines(user)])
    await interaction.create_initial_response(MESSAGE, text[:2000], flags=EPHEMERAL)


async def memory_export(
    interaction: hikari.CommandInteraction, gateway: Gateway, shard: int
) -> None:
    # Reading every store of the user may take longer than the 3 s an interaction waits.
    await interaction.create_initial_response(
        hikari.ResponseType.DEFERRED_MESSAGE_CREATE, flags=EPHEMERAL
    )
    where = RequestContext(shard_id=shard, channel_id=str(interaction.channel_id))
    try:
        answer = await gateway.data_rights.export(interaction.user.id, where)
        if answer.document is None:
            await interaction.edit_initial_response(f"Your export was refused ({answer.reason}).")
            return
        document = json.dumps(answer.document.model_dump(mode="json"), indent=2).encode()
        file = hikari.Bytes(document, "my-memories.json")
        await (await interaction.user.fetch_dm_channel()).send("What I remember.", attachment=file)
    except (TimeoutError, ToolClientUnavailable):
        await interaction.edit_initial_response(NO_ANSWER)
    except hikari.ForbiddenError:
        await interaction.edit_initial_response("I cannot DM you: allow DMs from this server.")
    else:
        await interaction.edit_initial_response("I sent you a DM with all I remember of you.")


async def memory_forget_me(interaction: hikari.CommandInteraction) -> None:
    button = interaction.app.rest.build_message_action_row().add_interactive_button(
        hikari.ButtonStyle.DANGER, f"{FORGET_ME}:{interaction.user.id}", label="Forget me"
    )
    text = "This erases all I remember about you, everywhere, and I stop learning about you."
    await interaction.create_initial_response(MESSAGE, text, component=button, flags=EPHEMERAL)


async def confirm_forget_me(
    interaction: hikari.ComponentInteraction, gateway: Gateway, shard: int
) -> None:
    """The button of `/memory forget-me`, which only the person who asked may press."""
    if interaction.custom_id != f"{FORGET_ME}:{interaction.user.id}":
        await interaction.create_initial_response(MESSAGE, "Not your button.", flags=EPHEMERAL)
        return
    await interaction.create_initial_response(hikari.ResponseType.DEFERRED_MESSAGE_UPDATE)
    where = RequestContext(shard_id=shard, channel_id=str(interaction.channel_id))
    try:
        answer = await gateway.data_rights.forget(interaction.user.id, where)
        done = answer.receipt
        refused = f"Your erasure was refused ({answer.reason})."
        text = f"Forgotten. Memories erased: {done.memories_deleted}." if done else refused
    except (TimeoutError, ToolClientUnavailable):
        text = NO_ANSWER
    await interaction.edit_initial_response(text, components=[])


class MemoryBot:
    """The example's listeners, on a bot whose gateway runs with it (`Gateway.for_bot`)."""

    def __init__(self, bot: hikari.GatewayBot, persona: Persona, persona_id: int) -> None:
        self.bot, self.persona, self.persona_id = bot, persona, persona_id
        self.me: hikari.User | None = None

    def attach(self) -> None:
        self.bot.subscribe(hikari.StartedEvent, self.on_started)
        self.bot.subscribe(hikari.MessageCreateEvent, self.on_message)
        self.bot.subscribe(hikari.InteractionCreateEvent, self.on_interaction)

    async def on_started(self, _: hikari.StartedEvent) -> None:
        self.me = self.bot.get_me() or await self.bot.rest.fetch_my_user()
        if not self.persona.name:  # the persona goes by the bot's own name
            name = self.me.global_name or self.me.username
            self.persona = dataclasses.replace(self.persona, name=name)
        await register_memory_command(self.bot.rest)

    async def on_message(self, event: hikari.MessageCreateEvent) -> None:
        if self.me is not None:
            await answer_message(event, self.me, self.persona, self.persona_id)

    async def on_interaction(self, event: hikari.InteractionCreateEvent) -> None:
        interaction, gateway, shard = event.interaction, self.persona.gateway, event.shard.id
        if isinstance(interaction, hikari.ComponentInteraction):
            if interaction.custom_id.startswith(FORGET_ME):
                await confirm_forget_me(interaction, gateway, shard)
        elif isinstance(interaction, hikari.CommandInteraction) and interaction.options:
            subcommand = interaction.options[0].name if interaction.command_name == "memory" else ""
            if subcommand == "list":
                await memory_list(interaction, gateway, self.persona_id)
            elif subcommand == "export":
                await memory_export(interaction, gateway, shard)
            elif subcommand == "forget-me":
                await memory_forget_me(interaction)


def main() -> int:
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    llm, token = ChatCompletions.from_settings(settings), settings.discord_token
    if token is None or settings.bot_persona_id is None or llm is None:
        print("set DISCORD_TOKEN, LTM_BOT_PERSONA_ID and LTM_LLM_BASE_URL", file=sys.stderr)
        return 2
    # Unprivileged intents: a message that mentions the bot, and a DM, carry their content.
    bot = hikari.GatewayBot(token.get_secret_value(), rest_url=settings.discord_api_url)
    persona = Persona("", Gateway.for_bot(bot, settings), llm)
    MemoryBot(bot, persona, settings.bot_persona_id).attach()
    bot.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
