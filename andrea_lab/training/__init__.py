"""How a fit trains, apart from the LightningModule that tells the story (andrea_lab.module):
the optimizer and schedule, the validated training arguments, the non-finite policy, the RNG
states a checkpoint carries, and starting from another model's weights (``init_from``)."""
