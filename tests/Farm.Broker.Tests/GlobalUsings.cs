// The wire contract has SqlFilter and CorrelationFilter messages too; in these tests the names mean the rule engine's.
global using CorrelationFilter = Farm.Broker.Rules.CorrelationFilter;
global using SqlFilter = Farm.Broker.Rules.SqlFilter;
