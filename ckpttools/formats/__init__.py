"""What the bytes mean to each engine: tensor names, drafter flavors, config fields, and
engine conventions (aux-layer ids, target configs)."""
