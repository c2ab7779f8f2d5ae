"""Policies behind one protocol: scripted, Hugging Face transformers, OpenAI-compatible servers."""

from leap_agents.policies.base import Generation, History, Policy, ScriptedPolicy, turn_of
from leap_agents.policies.hf import DEFAULT_CHAT_TEMPLATE, HFPolicy, render_chat
from leap_agents.policies.openai import OpenAIPolicy

__all__ = ["DEFAULT_CHAT_TEMPLATE", "Generation", "HFPolicy", "History", "OpenAIPolicy", "Policy",
           "ScriptedPolicy", "render_chat", "turn_of"]
