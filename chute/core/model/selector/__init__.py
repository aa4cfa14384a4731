"""JMS SQL-92 message selectors: ``compile_selector(text).matches(message)``.

``lexer`` turns text into tokens, ``parser`` turns tokens into a type-checked
syntax tree, ``evaluate`` compiles the tree into closures once per selector.
"""

from chute.core.model.selector.evaluate import Selector, compile_selector

__all__ = ["Selector", "compile_selector"]
