"""Policies behind one protocol: scripted, Hugging Face transformers, OpenAI-compatible servers."""

from leap_agents.policies.base import Generation, History, Policy, ScriptedPolicy, turn_of
from leap_agents.policies.hf import HFPolicy
from leap_agents.policies.openai import OpenAIPolicy
from leap_agents.policies.prompts import DEFAULT_CHAT_TEMPLATE, ChatPrompt, MiniPrompt, render_chat

__all__ = ["DEFAULT_CHAT_TEMPLATE", "ChatPrompt", "Generation", "HFPolicy", "MiniPrompt", "History", "OpenAIPolicy", "Policy",
           "ScriptedPolicy", "render_chat", "turn_of"]
