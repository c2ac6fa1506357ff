import { Hono } from "hono";
import script from "../lua/floodgate.lua";

const app = new Hono();
app.get("/__smoke", (c) => c.text(`lua bytes: ${script.length}`));
export default app;
