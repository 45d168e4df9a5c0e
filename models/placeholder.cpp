// placeholder until models lands
