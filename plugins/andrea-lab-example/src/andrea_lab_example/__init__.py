"""Example andrea-lab plugins, registered as entry points in this package's ``pyproject.toml``.

* ``squared_relu`` (group ``andrea_lab.activation``): ReLU², :class:`~andrea_lab_example.activations.SquaredReLU`;
* ``sandwich`` (group ``andrea_lab.norm_placement``): a LayerNorm on both sides of the sublayer,
  :class:`~andrea_lab_example.placements.SandwichNorm`;
* ``dyt`` (group ``andrea_lab.norm``): Dynamic Tanh, :class:`~andrea_lab_example.norms.DynamicTanh`.

andrea-lab never imports this package by name: it finds the classes through the entry points
when a config selects them.
"""

__version__ = "0.1.0"
