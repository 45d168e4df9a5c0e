// placeholder until train lands
