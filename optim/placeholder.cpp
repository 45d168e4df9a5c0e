// placeholder until optim lands
