"""A reference hikari bot that remembers, in parts to lift into a bot of one's own: the LLM loop
(`examples.bot.llm`), the persona's context and tool runner (`examples.bot.memory`), hikari's
listeners and the `/memory` commands (`examples.bot.discord_bot`). `make chat`
(`examples/chat.py`) runs the same loop in the terminal."""
