// placeholder until comm lands
