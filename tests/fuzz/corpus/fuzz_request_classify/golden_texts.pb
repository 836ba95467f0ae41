
classifyHello world.JThe baker next door sells bread, rolls, and small cakes with honey on top.  leading and trailing spaces  multiple     internal   spacesTabs	and
newlines
here(Café crème brûlée — naïve façadeÅNGSTRÖM Ünïcödéé (e + combining acute) vs é